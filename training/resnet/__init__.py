"""RLinf-compatible ResNet reward classifier: config, model, checkpoint (plain torch, no Django)."""

"""RLinf's `full_weights.pt` for a trained VLM model, made or checked after training (training/vlm/rlinf_export.py)."""

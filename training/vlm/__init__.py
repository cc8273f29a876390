"""Qwen3-VL trend reward model: LoRA fine-tuning, window scoring, parsing and rewards (no Django here)."""

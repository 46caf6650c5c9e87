"""Qwen2.5-Omni (thinker) target and drafter for as2d on MNN's LLM engine."""

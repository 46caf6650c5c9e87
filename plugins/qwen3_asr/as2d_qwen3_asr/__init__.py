"""Qwen3-ASR target and drafter for as2d."""

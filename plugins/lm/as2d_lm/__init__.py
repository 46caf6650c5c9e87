"""Language-model decoding that the Qwen plugins share on any backend: ``lm`` writes the as2d contracts once over a
small ``LMState`` (prefill, append with all-position logits, cut the cache back); ``torch_lm`` is that state for a
transformers model on torch. MNN's LLM engine (``as2d_mnn.llm``) is another state. Importing it imports no runtime."""

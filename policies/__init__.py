"""Everything that knows about tokens and models: model loading, chat rendering,
tool-call formatting, and the generation / scoring engines (vLLM, transformers)."""

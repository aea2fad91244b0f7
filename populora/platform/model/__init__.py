"""The frozen base model: loading it (the embedded GGUF, an HF id, a local dir, a tiny random model), its chat
template's stop tokens, the LoRA adapter's shape, and the cache of what is built once.
"""

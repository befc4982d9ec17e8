"""The trained model in the Llama ecosystem: Hugging Face and GGUF export, HF import."""

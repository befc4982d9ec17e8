"""The Spark decoder's own modelling code for transformers (`trust_remote_code=True`): these
files are copied, as they are, into every Hugging Face folder of a model with architecture
options a Llama cannot express (docs/export.md "Models with architecture options"). The
package never imports them: they need torch and transformers."""

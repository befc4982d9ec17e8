"""SparkConfig: the config.json of a Spark Train model with architecture options, for
`AutoConfig.from_pretrained(folder, trust_remote_code=True)`. Written by `spark export --to hf`
(Spark Train, docs/export.md "Models with architecture options"); the maths is in
modeling_spark.py beside it."""
from transformers import PretrainedConfig


class SparkConfig(PretrainedConfig):
    model_type = "spark"

    def __init__(self, vocab_size=256, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                 rms_norm_eps=1e-5, rope_theta=10000.0,
                 mlp="swiglu",          # "relu2": relu(h Wup^T)^2 Wdown^T, no gate
                 qk_norm=False,         # q and k rms-normalised per head, no weight
                 logit_cap=0.0,         # > 0: logits = cap tanh(logits / cap)
                 bigram=0,              # > 0: buckets of the hashed (previous, current) table
                 value_residual=False,  # layers 1.. mix layer 0's values in by a learned lambda
                 unet=False,            # block i's output, weighted, into block n-1-i's input
                 **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = 4 * hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = hidden_size // num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.mlp = mlp
        self.qk_norm = qk_norm
        self.logit_cap = logit_cap
        self.bigram = bigram
        self.value_residual = value_residual
        self.unet = unet
        kwargs.pop("intermediate_size", None)  # derived: 4 x hidden_size
        kwargs.pop("head_dim", None)           # derived: hidden_size / num_attention_heads
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)

"""The tokenizer.json an exported model travels with, never a guess: the byte tokenizer
(id = byte value) or the job's own, checked by its sha256, with the ids `spark generate`
puts around a prompt (docs/export.md "The byte tokenizer", "A BPE tokenizer")."""
from __future__ import annotations

import os
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

from sparktrain.core.errors import SparkError, first_line
from sparktrain.core.fsutil import read_input
from sparktrain.core.jobfiles import TOKENIZER
from sparktrain.data.pairs import BOS, EOS, SEP
from sparktrain.data.source import trained_on
from sparktrain.data.tokenizer import read_tokenizer
from sparktrain.model.config import ModelConfig

SPECIALS = {BOS: "<|bos|>", SEP: "<|sep|>", EOS: "<|eos|>"}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))  # the others, in byte order, after the Latin-1 block
    return {b: chr(b) if b in printable else chr(next(extra)) for b in range(256)}


def byte_tokenizer() -> Tokenizer:
    chars = bytes_to_unicode()
    vocab = {SPECIALS.get(b, chars[b]): b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.normalizer = normalizers.ByteLevel()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(SPECIALS[b], special=True) for b in sorted(SPECIALS)])
    return _spark_template(tok, pairs=True)


def model_tokenizer_json(weights: str | os.PathLike, meta: dict, cfg: ModelConfig,
                         given: str | os.PathLike | None) -> str:
    """The tokenizer.json text an exported model travels with, never a guess: weights that
    record `tokenizer_sha256` take `given` or the one beside them, with that sha256; others
    are a byte-token model: the byte tokenizer, or `given` when its vocabulary fits."""
    recorded = meta.get("tokenizer_sha256")
    if recorded is None:
        if given is None and cfg.vocab != 256:
            raise SparkError(f"{os.fspath(weights)} has a vocab of {cfg.vocab} tokens and "
                             f"records no tokenizer; give the tokenizer.json it was trained "
                             f"with (--tokenizer)")
        return tokenizer_json(cfg, given)
    path = Path(given) if given is not None else Path(weights).parent / TOKENIZER
    if not path.is_file():
        raise SparkError(f"{os.fspath(weights)} was trained with a tokenizer (sha256 "
                         f"{str(recorded)[:12]}...) but there is no {path}; give the job's "
                         f"tokenizer.json with --tokenizer")
    tok, _ = read_tokenizer(path, recorded, os.fspath(weights))  # the sha256 checked first
    if tok.kind == "byte":   # a corpus job on bytes: the HF byte tokenizer
        return tokenizer_json(cfg, None)
    return with_spark_template(tokenizer_json(cfg, path), pairs=trained_on(meta).prompted)


def with_spark_template(tok_text: str, *, pairs: bool) -> str:
    """A job's BPE tokenizer.json with the ids `spark generate` puts around a prompt as its
    post-processor ([BOS] prompt [SEP] for a pairs model, [BOS] prompt for a corpus model)."""
    return _spark_template(Tokenizer.from_str(tok_text), pairs=pairs).to_str(pretty=True) + "\n"


def _spark_template(tok: Tokenizer, *, pairs: bool) -> Tokenizer:
    bos, sep = SPECIALS[BOS], SPECIALS[SEP]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {sep}" if pairs else f"{bos} $A",
        special_tokens=[(bos, tok.token_to_id(bos)), (sep, tok.token_to_id(sep))])
    return tok


def tokenizer_json(cfg: ModelConfig, path: str | os.PathLike | None) -> str:
    """The tokenizer.json text: the byte tokenizer, or the file at `path` checked
    against the model's vocabulary."""
    if path is None:
        return byte_tokenizer().to_str()
    text = read_input(path, "tokenizer").decode("utf-8", errors="replace")
    try:
        tok = Tokenizer.from_str(text)
    except Exception as err:  # the library raises its own types for every parse error
        raise SparkError(f"{os.fspath(path)} is not a tokenizers tokenizer.json "
                         f"({first_line(err)})") from None
    size = tok.get_vocab_size(with_added_tokens=True)
    if size != cfg.vocab:
        raise SparkError(f"{os.fspath(path)} has {size} tokens but the weights' vocab is "
                         f"{cfg.vocab}; give the tokenizer the model was trained with")
    return text


def special_ids(tok_text: str) -> dict[str, int]:
    """bos/sep/eos ids: the tokenizer's `<|bos|>`-style tokens, else the byte values."""
    tok = Tokenizer.from_str(tok_text)
    return {name: byte if (found := tok.token_to_id(SPECIALS[byte])) is None else found
            for name, byte in (("bos", BOS), ("sep", SEP), ("eos", EOS))}


def tokenizer_config(tok_text: str, cfg: ModelConfig) -> dict:
    """tokenizer_config.json for transformers' AutoTokenizer (the fast tokenizer)."""
    tok = Tokenizer.from_str(tok_text)
    # model_input_names: a Llama takes no token_type_ids, which a template post-processor
    # would otherwise hand to `model.generate(**tok(prompt))`
    conf = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.seq_len,
            "clean_up_tokenization_spaces": False, "padding_side": "left",
            "model_input_names": ["input_ids", "attention_mask"]}
    conf.update({f"{name}_token": tok.id_to_token(i) for name, i in special_ids(tok_text).items()})
    conf["pad_token"] = conf["eos_token"]   # Spark pads with EOS too
    return conf

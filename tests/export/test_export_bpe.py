"""`spark export` of a BPE job without --tokenizer: the job's tokenizer.json beside
the weights, checked against the sha256 the weights record, or a one-line refusal."""
import dataclasses
import json

import gguf
import pytest

from sparktrain.data.tokenizer import train_bpe
from sparktrain.core.fsutil import sha256_bytes
from sparkhelp import assert_one_line_error, run_spark

from exportkit import SMALL, project_prompts, write_weights


@pytest.fixture(scope="module")
def bpe_job(tmp_path_factory):
    """A BPE pairs job's folder: weights of the BPE's vocab beside its tokenizer.json."""
    folder = tmp_path_factory.mktemp("bpe-job") / "out" / "train" / "bpe"
    folder.mkdir(parents=True)
    tok = train_bpe(project_prompts(40) * 4, 300)
    text = tok.to_json().encode()
    (folder / "tokenizer.json").write_bytes(text)
    write_weights(folder / "weights.safetensors", dataclasses.replace(SMALL, vocab=tok.vocab),
                  dataset_kind="pairs", tokenizer="bpe", tokenizer_sha256=sha256_bytes(text))
    return folder, tok


def test_hf_export_takes_the_jobs_tokenizer(bpe_job, tmp_path):
    folder, tok = bpe_job
    rc, _, err = run_spark(["export", tmp_path / "hf", "--to", "hf",
                            "--weights", folder / "weights.safetensors"])
    assert rc == 0, err
    # the job's vocabulary and merges, with Spark's prompt format as the post-processor
    exported = json.loads((tmp_path / "hf/tokenizer.json").read_text())
    job = json.loads((folder / "tokenizer.json").read_text())
    assert exported["model"] == job["model"] and job["post_processor"] is None
    assert exported["post_processor"]["type"] == "TemplateProcessing"
    conf = json.loads((tmp_path / "hf/config.json").read_text())
    assert conf["vocab_size"] == tok.vocab > 256
    assert (conf["bos_token_id"], conf["eos_token_id"]) == (tok.bos, tok.eos) == (0, 2)


@pytest.mark.parametrize("kind, after", [("pairs", ["<|sep|>"]), ("corpus", [])])
def test_the_exported_bpe_tokenizer_adds_what_spark_generate_adds(tmp_path, kind, after):
    """[BOS] + prompt + [SEP] for a pairs model, [BOS] + prompt for a corpus model: the
    ids `spark generate` feeds the model (eval/generate.py), from the tokenizer alone."""
    from tokenizers import Tokenizer

    from sparktrain.eval.generate import corpus_context, prompt_context

    folder = tmp_path / "job"
    folder.mkdir()
    tok = train_bpe(project_prompts(40) * 4, 300)
    text = tok.to_json().encode()
    (folder / "tokenizer.json").write_bytes(text)
    write_weights(folder / "weights.safetensors", dataclasses.replace(SMALL, vocab=tok.vocab),
                  dataset_kind=kind, tokenizer="bpe", tokenizer_sha256=sha256_bytes(text))
    rc, _, err = run_spark(["export", tmp_path / "hf", "--to", "hf",
                            "--weights", folder / "weights.safetensors"])
    assert rc == 0, err
    hf = Tokenizer.from_file(str(tmp_path / "hf/tokenizer.json"))
    for prompt in project_prompts(6):
        enc = hf.encode(prompt)
        assert enc.tokens[0] == "<|bos|>" and enc.tokens[len(enc.tokens) - len(after):] == after \
            if after else enc.tokens[-1] != "<|sep|>"
        spark = (prompt_context(prompt, 4096, tok) if kind == "pairs"
                 else corpus_context(tok, prompt, 4096))[0]
        assert enc.ids == spark.tolist()
        assert hf.encode(prompt, add_special_tokens=False).ids == tok.encode(prompt).tolist()


def test_gguf_export_takes_the_jobs_tokenizer(bpe_job, tmp_path):
    folder, tok = bpe_job
    out = tmp_path / "m.gguf"
    rc, _, err = run_spark(["export", out, "--to", "gguf",
                            "--weights", folder / "weights.safetensors"])
    assert rc == 0, err
    reader = gguf.GGUFReader(out)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert len(tokens) == tok.vocab and tokens[:3] == ["<|bos|>", "<|sep|>", "<|eos|>"]
    assert reader.fields["tokenizer.ggml.bos_token_id"].contents() == tok.bos


@pytest.mark.parametrize("to", ["hf", "gguf"])
def test_a_missing_or_other_tokenizer_is_refused(bpe_job, tmp_path, to):
    folder, _ = bpe_job
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "weights.safetensors").write_bytes((folder / "weights.safetensors").read_bytes())
    out = tmp_path / ("m.gguf" if to == "gguf" else "hf")
    rc, _, err = run_spark(["export", out, "--to", to, "--weights", alone / "weights.safetensors"])
    assert_one_line_error(rc, err, "no ", "tokenizer.json", "--tokenizer")
    other = tmp_path / "other.json"
    other.write_text(train_bpe(["something else entirely " * 30, "xyz " * 40], 300).to_json())
    rc, _, err = run_spark(["export", out, "--to", to, "--weights", alone / "weights.safetensors",
                            "--tokenizer", other])
    assert_one_line_error(rc, err, "is not the tokenizer", "sha256")
    assert not out.exists()


def test_a_byte_model_of_a_bigger_vocab_without_a_record_is_refused(tmp_path):
    w = tmp_path / "w.safetensors"
    write_weights(w, dataclasses.replace(SMALL, vocab=300))
    rc, _, err = run_spark(["export", tmp_path / "hf", "--to", "hf", "--weights", w])
    assert_one_line_error(rc, err, "vocab of 300", "records no tokenizer")

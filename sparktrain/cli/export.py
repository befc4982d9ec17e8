"""`spark export` (Spark weights as a Hugging Face folder or a GGUF file) and
`spark import` (a Hugging Face folder as Spark weights); sparktrain/export/, docs/export.md."""
from __future__ import annotations

import importlib

from sparktrain.core.errors import printable

# The format -> its writer (module, function), imported when used; a writer returns the
# names of the files it wrote into a folder, or None for a single file.
WRITERS = {"hf": ("sparktrain.export.hf", "export_hf"),
           "gguf": ("sparktrain.export.gguf", "export_gguf")}


def register(sub) -> None:
    add_export(sub)
    add_import(sub)


def add_export(sub) -> None:
    p = sub.add_parser(
        "export", help="write trained weights as a Hugging Face folder or a GGUF file",
        description="Export Spark weights for the Llama ecosystem: --to hf writes a folder "
                    "that transformers loads (config, model.safetensors, tokenizer): "
                    "LlamaForCausalLM, Arcee or Qwen 3 for the one option each computes, else "
                    "the Spark architecture's own code (trust_remote_code=True); --to gguf "
                    "writes one file llama.cpp runs (llama, arcee, qwen3; other architecture "
                    "options are refused). docs/export.md \"What exports\".", func=cmd_export)
    p.add_argument("out", metavar="OUT", help="output folder (hf) or .gguf file (gguf)")
    p.add_argument("--to", required=True, choices=tuple(WRITERS), help="the format to write")
    p.add_argument("--weights", required=True, help="Spark weights.safetensors to export")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json the model was trained with (default: the job's "
                        "tokenizer.json beside --weights when the weights record one, "
                        "checked by sha256; else the byte tokenizer, id = byte value)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT when it exists and is not empty")


def add_import(sub) -> None:
    p = sub.add_parser(
        "import", help="turn a Hugging Face Llama folder into Spark weights",
        description="Read a Llama-compatible Hugging Face folder (config.json + "
                    "model.safetensors; also the Arcee, Qwen 3 and Spark-architecture folders "
                    "spark export writes) and write Spark weights, a base for further "
                    "training.",
                    func=cmd_import)
    p.add_argument("folder", metavar="DIR", help="the Hugging Face model folder")
    p.add_argument("--from", dest="source", required=True, choices=("hf",),
                   help="the format to read")
    p.add_argument("--out", required=True, help="Spark weights file to write")
    p.add_argument("--force", action="store_true", help="replace --out when it exists")


def cmd_export(args) -> int:
    from sparktrain.core.progress import Progress

    module, name = WRITERS[args.to]
    write = getattr(importlib.import_module(module), name)
    with Progress("export", total=1, unit=f"{args.to} written") as bar:
        names = write(args.weights, args.out, args.tokenizer, args.force)
        bar.advance(note=args.out)
        print(f"wrote {printable(args.out)}" + (f": {', '.join(names)}" if names else ""))
    return 0


def cmd_import(args) -> int:
    from sparktrain.export.hf import import_hf

    arch = import_hf(args.folder, args.out, args.force)["arch"]
    print(f"wrote {printable(args.out)}: dim {arch['dim']}, {arch['n_layer']} layers, "
          f"{arch['n_head']} heads, {arch['n_kv_head']} kv heads, seq_len {arch['seq_len']}")
    return 0

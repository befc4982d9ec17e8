"""The HTML template `dvc plots show` fills, with the Vega libraries inside it (`make setup`).

    python tools/plots_page.py build/dvc-plots.html

DVC's own page loads vega, vega-lite and vega-embed from a CDN, so offline it shows
empty panels. .dvc/config names this template instead (`plots.html_template`): DVC's
page with the same three libraries written into it, so the page draws with no network.
The libraries come from their npm packages, the versions DVC's page asks for, each
tarball checked against the integrity the registry published for it; `npm pack`
fetches a tarball alone (no dependencies: each build/*.min.js is self-contained).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from sparktrain import runtime  # first, as every entry point (no numpy is loaded here)

runtime.start()

from sparktrain.core.safeload import load_json  # noqa: E402

# (npm package@version, file in its tarball, the registry's sha512 of the tarball);
# the versions of dvc_render's VegaRenderer.SCRIPTS, so DVC's specs draw as DVC meant
LIBRARIES = (
    ("vega@5.20.2", "package/build/vega.min.js",
     "qmH7aD9GGPpssVdxL1xgcdxTbQzyRUeRR16Os385ymvQhiwCYQNA6+eXUPAZDTVLfk0RXu6Jzj6kUE5jQ80EVw=="),
    ("vega-lite@5.2.0", "package/build/vega-lite.min.js",
     "Yxcg8MvYfxHcG6BbkaKT0oVCIMIcE19UvqIsEwBmyd/7h2nzW7oRnID81T8UrY7hpDrIr6wa2JADOT2dhGNErw=="),
    ("vega-embed@6.18.2", "package/build/vega-embed.min.js",
     "wcDyQPE4J5aiCDc3/suH5RQDvrKkjuLkhzUcbOLwEkNF8/+pp17tS0JghzEvAPNRg+5aG1/N2ydixq8Lk3dOlg=="),
)

# dvc_render's PAGE_HTML with the scripts written in: DVC fills {plot_divs} and
# {refresh_tag}; without {scripts} it adds no CDN <script> of its own
PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
%s
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""

# DVC's panels call vegaEmbed("#id", spec). Two changes to that call:
# - vega-embed draws on a canvas unless told; as SVG each mark is an element of the page
#   (a test counts them) and stays sharp when zoomed;
# - a series with no points (a pairs job's held-out bits per byte: its header only) comes
#   as an empty spec, which vega-embed draws as an empty panel; the page says so in one
#   line instead.
EMBED = """    <script>
    const vegaEmbedAsIs = window.vegaEmbed;
    window.vegaEmbed = (el, spec, options) => {
        if (Object.keys(spec).length === 0) {
            document.querySelector(el).textContent =
                el.slice(1) + ": no points to draw (the series holds no rows)";
            return Promise.resolve();
        }
        return vegaEmbedAsIs(el, spec, Object.assign({renderer: "svg"}, options));
    };
    </script>"""


def fail(message: str) -> None:
    print(f"plots_page: {message}", file=sys.stderr)
    raise SystemExit(2)


def fetch(spec: str, member: str, sha512: str, folder: Path) -> str:
    """The text of `member` in the npm tarball of `spec`, after checking its sha512."""
    npm = shutil.which("npm")
    if npm is None:
        fail("npm not found: the offline `dvc plots show` page takes Vega from npm "
             "packages; install Node.js's npm (Debian: apt-get install npm) and run make setup")
    done = subprocess.run([npm, "pack", "--json", "--pack-destination", str(folder), spec],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        fail(f"npm pack {spec} failed: {last}")
    tarball = folder / load_json(done.stdout, "npm pack's listing")[0]["filename"]
    digest = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if digest != sha512:
        fail(f"{tarball.name} has sha512-{digest}, not the pinned sha512-{sha512}")
    with tarfile.open(tarball) as tar:
        text = tar.extractfile(member).read().decode("utf-8")
    if "</script" in text.lower():
        fail(f"{spec}'s {member} holds '</script', which would end its inline <script>")
    return text


def build_page() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        scripts = [f"    <script>/* {spec} {member[len('package/'):]} */\n"
                   f"{fetch(spec, member, sha512, Path(tmp))}\n    </script>"
                   for spec, member, sha512 in LIBRARIES]
    return PAGE % "\n".join(scripts + [EMBED])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the template to write (build/dvc-plots.html)")
    ap.add_argument("--online", action="store_true",
                    help="where npm cannot be had: DVC's own page, which loads the libraries "
                         "from its CDN (DVC fills {scripts}), so `dvc plots show` still works "
                         "with a network")
    args = ap.parse_args()
    page = PAGE % "\n".join(["    {scripts}", EMBED]) if args.online else build_page()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".tmp")
    partial.write_text(page, encoding="utf-8")
    partial.replace(args.out)
    if args.online:
        print(f"plots_page: note: wrote {args.out}, which loads Vega from DVC's CDN: "
              f"`dvc plots show` draws only with a network", file=sys.stderr)
    else:
        print(f"wrote {args.out} ({len(page) // 1024} KiB: "
              f"{', '.join(spec for spec, _, _ in LIBRARIES)})")


if __name__ == "__main__":
    main()

"""tools/plots_page.py without the registry: npm is replaced by a stand-in that writes a
tarball, so the checks on what arrives (sha512, an inline-script breaker) and the page
it makes (DVC's placeholders, no CDN) are tested offline. The real page in a browser:
tests/pipeline/test_plots_page.py."""
import base64
import hashlib
import io
import json
import subprocess
import sys
import tarfile

import pytest

from sparkhelp import ROOT

sys.path.insert(0, str(ROOT))
from tools import plots_page  # noqa: E402


def tarball(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def fake_npm(monkeypatch):
    """npm pack writes, for each package, a tarball holding its build file."""
    served = {}

    def fake_run(argv, **kwargs):
        folder, spec = argv[argv.index("--pack-destination") + 1], argv[-1]
        name = spec.replace("@", "-") + ".tgz"
        with open(f"{folder}/{name}", "wb") as f:
            f.write(served[spec])
        return subprocess.CompletedProcess(argv, 0, json.dumps([{"filename": name}]), "")

    monkeypatch.setattr(plots_page.shutil, "which", lambda _: "/usr/bin/npm")
    monkeypatch.setattr(plots_page.subprocess, "run", fake_run)
    return served


def serve(served, monkeypatch, texts):
    """Serve each library's build file with `texts[spec]`, pinned to its true sha512."""
    pinned = []
    for spec, member, _ in plots_page.LIBRARIES:
        served[spec] = tarball({member: texts[spec]})
        digest = base64.b64encode(hashlib.sha512(served[spec]).digest()).decode()
        pinned.append((spec, member, digest))
    monkeypatch.setattr(plots_page, "LIBRARIES", tuple(pinned))


def test_the_page_holds_each_library_and_dvc_placeholders(fake_npm, monkeypatch):
    serve(fake_npm, monkeypatch, {spec: f"window.lib_{i} = {i};"
                                  for i, (spec, _, _) in enumerate(plots_page.LIBRARIES)})
    page = plots_page.build_page()
    for i in range(3):
        assert f"window.lib_{i} = {i};" in page
    assert "{plot_divs}" in page and "{refresh_tag}" in page
    # DVC writes its CDN <script>s where {scripts} stands: the page must not have it
    assert "{scripts}" not in page and "src=" not in page
    assert 'renderer: "svg"' in page


def test_a_tarball_other_than_the_pinned_one_is_refused(fake_npm, monkeypatch, capsys):
    serve(fake_npm, monkeypatch, {spec: "ok" for spec, _, _ in plots_page.LIBRARIES})
    spec = plots_page.LIBRARIES[0][0]
    fake_npm[spec] = tarball({plots_page.LIBRARIES[0][1]: "tampered"})
    with pytest.raises(SystemExit) as stop:
        plots_page.build_page()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the pinned sha512-" in err[0], err


def test_a_library_that_would_end_its_script_is_refused(fake_npm, monkeypatch, capsys):
    serve(fake_npm, monkeypatch, {spec: 'x = "</SCRIPT>";'
                                  for spec, _, _ in plots_page.LIBRARIES})
    with pytest.raises(SystemExit) as stop:
        plots_page.build_page()
    assert stop.value.code == 2 and "'</script'" in capsys.readouterr().err


def test_no_npm_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(plots_page.shutil, "which", lambda _: None)
    with pytest.raises(SystemExit) as stop:
        plots_page.build_page()
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "npm not found" in err[0]

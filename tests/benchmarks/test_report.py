"""A benchmark's markdown report is headed by its host and date, then the command as run."""

import json
import time

from benchmarks._report import emit


def test_the_markdown_is_headed_by_host_and_date_then_the_command(tmp_path, capsys):
    emit(tmp_path, "landscape", "Landscape", [], "2 files.", {"seconds": 1.0, "rows": []}, "| a |\n|---|", "ok",
         as_json=False)
    lines = (tmp_path / "landscape.md").read_text().splitlines()
    assert lines[0] == "# Landscape"
    assert lines[2].startswith("Host: ") and f"CPUs, {time.strftime('%Y-%m-%d', time.gmtime())}." in lines[2]
    assert lines[4] == "`python -m benchmarks.landscape`: 2 files."  # no stray space without arguments
    assert capsys.readouterr().out == "| a |\n|---|\nok\ntook 1.0 s\n"
    emit(tmp_path, "landscape", "Landscape", ["--cache", "f.json"], "1 file.", {"seconds": 1.0}, "t", "v", as_json=True)
    assert "`python -m benchmarks.landscape --cache f.json`: 1 file." in (tmp_path / "landscape.md").read_text()
    assert json.loads(capsys.readouterr().out) == {"seconds": 1.0}

import subprocess
import sys

from explainer.cli import main


def test_help_lists_subcommands(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert "version" in out


def test_unknown_subcommand_exits_2():
    proc = subprocess.run([sys.executable, "-m", "explainer", "no-such-command"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr

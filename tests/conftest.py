import io
import json
from pathlib import Path

import pytest

from aicalc.cli import main
from aicalc.env import Env

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = Path(__file__).resolve().parent / "data"


class Run:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    @property
    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli():
    """Run aicalc in-process with a fake environment: ``cli("kv-cache", "gpt2", tty=False)``."""

    def run(*args, tty=False, width=None):
        out, err = io.StringIO(), io.StringIO()
        code = main([str(a) for a in args], env=Env(stdout=out, stderr=err, stdout_isatty=tty, width=width))
        return Run(code, out.getvalue(), err.getvalue())

    return run

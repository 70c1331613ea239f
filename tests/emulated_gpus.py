"""``gputok`` with emulated CUDA GPUs, for tests of multi-GPU jobs in a process of their own (a
job killed and resumed): CuPy's stand-in (``fakecupy.py``, its kernels on the emulator) with
``$GPUTOK_EMULATED_GPUS`` devices, then the command line as ``python -m gputok`` runs it.

    python tests/emulated_gpus.py encode -e r50k_base a.jsonl -o out --backend cuda --devices all
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fakecupy import fake_cupy  # noqa: E402

sys.modules["cupy"] = fake_cupy([], devices=int(os.environ.get("GPUTOK_EMULATED_GPUS", "3")))

from gputok.backends import cuda  # noqa: E402

cuda._no_driver = lambda: False  # the stand-in is this process's driver

from gputok.cli import main  # noqa: E402

sys.exit(main())

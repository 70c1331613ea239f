"""The marks of a chunk's plan: a bit per byte (``mark``) and a spec per entry (``spec``).

The host plan writes them (``backends/hostplan.py``, ``spm_plan.py``), the stages and the kernels
read them (the kernels get them as ``ENC_*`` defines).
"""

from __future__ import annotations

from .split import NO_IDS

# per-byte marks
SEG_START, SEG_END, OUTSIDE, SPECIAL_START = 1, 2, 4, 8
NORMAL = 0xFFFFFFFF  # spec[e]: a piece of text, merged
GAP = NO_IDS  # spec[e]: no ids

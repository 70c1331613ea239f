"""Planning: where each stage of a model runs on one device, and its tables uploaded there.

A model's plan is built once per device (``Planner.get``): pieces cut on the device when its
pretok kernels cover the pattern's scanner family (``caps.pretok_families``), else on the host
(the vectorised scanner, or the pre-tokenizer's own split); the normaliser's quick check on the
device when it is one normal form the kernels check (``caps.normal_forms``); a family without
kernels there runs on the host altogether (the numpy backend, counted).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from ...unicode import FORMS
from ..device_stages import Tables
from ..device_tables import upload_tables
from ..protocol import DEVICE_FAMILIES

PRETOK_MODES = ("auto", "device", "scanner", "split", "program")


@dataclass
class ModelPlan:
    """Where a model's stages run on one device, and its uploaded tables."""

    mode: str  # where pieces are cut: "device" | "program" (the device's pattern matcher) |
    # "scanner" (host) | "split" (host)
    why: str
    pretok: object  # the model's Pretokenizer
    tables: Tables
    normalizer: tuple
    norm_form: "str | None" = None  # the normal form checked on the device (encode_nfc.cu)
    seg: object = None  # the segmenter's device form (``components.SegmenterDevice``)


def pretok_mode(model, families=DEVICE_FAMILIES) -> tuple[str, str]:
    """(mode, reason): where a model's pieces are cut on a device backend whose pretok kernels
    implement the scanner ``families`` (a device adapter may name fewer: ``pretok_families``)."""
    seg = model.segmenter
    if seg.device is None or seg.device.stage == "lattice":  # (a lattice: runners/unigram.py)
        return "host", f"{seg.name}: every stage runs on the host (no device kernels yet)"
    norm, pre = model.front
    if norm is not None and norm.steps is None:
        return "host", "its normaliser has no device-path form: every stage runs on the host"
    if pre.pattern is None:
        return "split", (f"its pre-tokenizer ({pre.name}) is not one regex: pieces are cut on "
                         "the host")
    sc = pre.scanner
    if sc is None:
        return "split", "its pattern has no vectorised form: pieces are cut on the host (regex)"
    if sc.family.name in families:
        return "device", f"pre-tokenization on the device ({sc.name} rules)"
    if sc.family.name in DEVICE_FAMILIES:
        return "scanner", (f"this device has no pretok kernels for the {sc.name} rules yet: "
                           "pieces are cut on the host (vectorised scanner)")
    return "scanner", (f"the {sc.name} pattern has spans only the reference regex resolves: "
                       "pieces are cut on the host (vectorised scanner)")


def device_norm_form(model, mode: str, forms=FORMS) -> "str | None":
    """The normal form whose quick check runs on the device (encode_nfc.cu), or None: a
    normaliser of exactly one normal form, with pieces cut on the device, on a device whose
    kernels check ``forms`` (a device adapter may name fewer: ``normal_forms``)."""
    form = model.normalizer.device_form
    return form if mode == "device" and form in forms else None


class Planner:
    """The plans of one device's models (built once each, tables uploaded on first use).
    ``pretok`` forces where pieces are cut ("auto", "device", "scanner" or "split")."""

    def __init__(self, dev, name: str, pretok: str = "auto"):
        if pretok not in PRETOK_MODES:
            raise ValueError(f"pretok must be one of {', '.join(PRETOK_MODES)}")
        self.dev, self.name, self.pretok = dev, name, pretok
        self._plans: dict = {}
        self._class_tables: dict = {}
        self._lock = threading.RLock()  # building a plan (also ahead, on a chunk worker)

    def describe(self, model) -> dict:
        """Where each stage of ``model`` runs here: {stage: description}."""
        host = self.host_family(model)
        mode, why = ("host", host) if host is not None else self.mode(model)
        where = f"device ({self.dev.name})"
        if mode == "host":
            return {"split": "host", "normalize": "host", "pretok": f"host: {why}",
                    "merge": f"host: {why}", "emit": "host"}
        norm = "none"
        if model.normalizer and mode == "program" and model.front[0] is None:
            norm = f"{where}: in the pre-tokenizer's pass"  # (BERT's, fused)
        elif model.normalizer:
            norm = (f"device quick check ({where}), flagged spans on the host"
                    if self.norm_form(model, mode) else "host")
        return {"split": "host", "normalize": norm,
                "pretok": where if mode == "device" else
                f"{where}: its own pass" if mode == "program" else f"host: {why}",
                "merge": where,
                "emit": where}

    def known(self, model) -> bool:
        """Whether ``model``'s plan is built already."""
        got = self._plans.get(id(model))
        return got is not None and got[0]() is model

    def get(self, model) -> ModelPlan:
        """The model's plan (built here on first use)."""
        with self._lock:
            return self._build(model)

    def host_family(self, model) -> "str | None":
        """Why every stage of ``model`` runs on the host here (None: the device runs some): a
        segmenter without a device form (WordLevel) everywhere, a lattice (Unigram) on a device
        without one; one whose kernel this
        device lacks (``caps.kernels``, e.g. Metal's). A segmenter whose device form is a whole
        chunk (SentencePiece BPE: ``runners/spm.py``, which the backend asks first) never runs
        through this planner's stages: the reason says so, with the device's own reason for a
        model it cannot run (its host stages then run it)."""
        form = model.segmenter.device
        if form is not None and form.stage == "chunk":
            from ..spm_device import why_not

            why = why_not(model)
            return f"{model.segmenter.name}: {why or 'its device form is a whole chunk'}"
        if form is not None and form.stage == "lattice":  # (``runners/unigram.py``)
            return (f"{model.segmenter.name}: its device form is a lattice" if
                    self.dev.caps.unigram_inline else
                    f"{model.segmenter.name}: every stage runs on the host (the {self.name} "
                    "device has no lattice)")
        mode, why = pretok_mode(model)
        if mode == "host":
            return why
        form = model.segmenter.device
        if not self.dev.has_kernel(form.kernel):
            return f"{model.segmenter.name}: the {self.name} device has no {form.kernel} kernel yet"
        return None

    def mode(self, model) -> tuple[str, str]:
        mode, why = pretok_mode(model, self.dev.caps.pretok_families)
        want = self.pretok
        if ((mode == "split" and want == "auto") or want == "program") and \
                model.segmenter.device is not None and self.program(model) is not None:
            return "program", ("pre-tokenization by the device's pattern matcher" +
                               (" (forced)" if want == "program" else " (a pattern without a "
                                                                       "scanner)"))
        if want == "program":
            raise ValueError(f"{model.name}: no pattern program on this device ({why})")
        if want == "auto" or want == mode or model.segmenter.device is None:
            return mode, why
        if want == "device":
            raise ValueError(f"{model.name}: pre-tokenization cannot run on the device ({why})")
        if want == "scanner":
            if model.pretokenizer.pattern is None or model.pretokenizer.scanner is None:
                raise ValueError(f"{model.name}: no vectorised scanner for this pre-tokenizer")
            return "scanner", "pieces cut on the host (vectorised scanner, forced)"
        return "split", "pieces cut on the host (pre-tokenizer split, forced)"

    def program(self, model):
        """The model's pre-tokenizer program (a pattern's, ``stages.pattern_program``; BERT's
        pass, ``components.bert_steps.BertProgram``) where this device cuts pieces by one
        (``caps.pretok_program``) and its pre-tokenizer has one, else None."""
        if not self.dev.caps.pretok_program:
            return None
        make = getattr(model.front[1], "program", None)  # (a pre-tokenizer that has one)
        return make() if make is not None else None

    def norm_form(self, model, mode: str) -> "str | None":
        return device_norm_form(model, mode, self.dev.caps.normal_forms)

    def _build(self, model) -> ModelPlan:
        key = id(model)
        got = self._plans.get(key)
        if got is not None and got[0]() is model:
            return got[1]
        for k in [k for k, (ref, _) in self._plans.items() if ref() is None]:
            del self._plans[k]  # tables of models that are gone
        mode, why = self.mode(model)
        scanner = model.pretokenizer.scanner if mode == "device" else None
        form = self.norm_form(model, mode)
        arrays, scalars = upload_tables(self.dev, model, scanner, self._class_tables, form)
        self.dev.synchronize()  # the streams are non-blocking: tables must be there before use
        norm, pre = model.front  # (BERT's normaliser runs in its pre-tokenizer's pass)
        if mode == "program":
            pre = self.dev.program_cutter(pre, self.program(model),
                                          getattr(model.segmenter, "whole_words", None))
        plan = ModelPlan(mode, why, pre, Tables(arrays, scalars),
                         norm.steps if norm is not None else (), form, model.segmenter.device)
        self._plans[key] = (weakref.ref(model), plan)
        return plan

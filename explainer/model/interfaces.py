"""The ``SupportsPP`` interface and the ``supports_pp()`` check (vLLM ``model_executor/models/interfaces.py``).

``supports_pp(model_or_cls)`` is the AND of two halves, exactly as in vLLM:

* the *attribute* half (``supports_pp_attributes``, vLLM's private ``_supports_pp_attributes``): a class
  declares ``SupportsPP`` (or duck-types it: a ``supports_pp`` flag plus ``make_empty_intermediate_tensors``);
  an instance is an ``isinstance`` of it;
* the *inspect* half (``supports_pp_inspect``, vLLM's ``_supports_pp_inspect``): ``forward`` accepts an
  ``intermediate_tensors`` keyword.

DiffusionGemma after vLLM PR #45828 still accepts ``intermediate_tensors`` in ``forward``; only the
attribute half fails, and that is enough for the generic startup check to reject PP > 1.
Half-implemented classes get vLLM's warnings (logger ``explainer.model.interfaces``). The notebooks show
both halves, so they are public here.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import torch

from explainer.model.stages import IntermediateTensors

logger = logging.getLogger(__name__)

__all__ = ["SupportsPP", "supports_pp", "supports_pp_attributes", "supports_pp_inspect"]


@runtime_checkable
class SupportsPP(Protocol):
    """The interface required for all models that support pipeline parallel."""

    supports_pp: ClassVar[Literal[True]] = True
    """A flag that indicates this model supports pipeline parallel.

    Note: there is no need to redefine this flag if this class is in the MRO of your model class.
    """

    def make_empty_intermediate_tensors(
        self, batch_size: int, dtype: torch.dtype, device: torch.device
    ) -> "IntermediateTensors":
        """Called when PP rank > 0 for profiling purposes (and the persistent receive buffer)."""
        ...

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, *,
                intermediate_tensors: "IntermediateTensors | None") -> "torch.Tensor | IntermediateTensors":
        """Accept ``IntermediateTensors`` when PP rank > 0; return them only for non-last PP ranks."""
        ...


# The same protocol, checked on a *class* object (vLLM's ``_SupportsPPType``).
@runtime_checkable
class _SupportsPPType(Protocol):
    supports_pp: Literal[True]

    def make_empty_intermediate_tensors(
        self, batch_size: int, dtype: torch.dtype, device: torch.device
    ) -> "IntermediateTensors": ...

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, *,
                intermediate_tensors: "IntermediateTensors | None") -> "torch.Tensor | IntermediateTensors": ...


def supports_pp(model: type | object) -> bool:
    """True when ``model`` (a class or an instance) implements the PP interface, as vLLM decides it."""
    supports_attributes = supports_pp_attributes(model)
    supports_inspect = supports_pp_inspect(model)

    if supports_attributes and not supports_inspect:
        logger.warning(
            "The model (%s) sets `supports_pp=True`, but does not accept "
            "`intermediate_tensors` in its `forward` method", model)

    if not supports_attributes:
        pp_attrs = ("make_empty_intermediate_tensors",)
        missing_attrs = tuple(attr for attr in pp_attrs if not hasattr(model, attr))
        if getattr(model, "supports_pp", False):
            if missing_attrs:
                logger.warning(
                    "The model (%s) sets `supports_pp=True`, but is missing PP-specific attributes: %s",
                    model, missing_attrs)
        elif not missing_attrs:
            logger.warning(
                "The model (%s) contains all PP-specific attributes, but does not set `supports_pp=True`.",
                model)

    return supports_attributes and supports_inspect


def supports_pp_attributes(model: type | object) -> bool:
    """vLLM's first test: does ``model`` declare the ``SupportsPP`` protocol (``supports_pp = True`` + attributes)?"""
    if isinstance(model, type):
        return isinstance(model, _SupportsPPType)
    return isinstance(model, SupportsPP)


def supports_pp_inspect(model: type | object) -> bool:
    """vLLM's second test: does ``model.forward`` accept ``intermediate_tensors``?"""
    model_forward = getattr(model, "forward", None)
    if not callable(model_forward):
        return False
    return _supports_kw(model_forward, "intermediate_tensors")


def _supports_kw(callable_: Any, kw_name: str) -> bool:
    """Does ``callable_`` accept ``kw_name`` as a keyword (vLLM ``utils.supports_kw``, simplified)?"""
    try:
        params = inspect.signature(callable_).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(kw_name)
    if param is not None:
        return param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


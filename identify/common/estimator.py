"""The estimator contract every fitter of :mod:`identify.estimation` follows (scikit-learn's),
and the small mixin that implements its bookkeeping (numpy and the standard library only).

* ``__init__(**settings)`` stores each setting under its own name, unchanged: no validation, no
  conversion, no derived attribute. Settings are checked when :meth:`fit` runs, so that
  :meth:`~EstimatorMixin.set_params` and :func:`clone` can never skip a check.
* ``fit(...)`` returns ``self``; it takes the data in one of two shapes:

  - the regression fitters (:class:`~identify.estimation.estimators.OLS`, ``WLS``, ``Ridge``,
    :class:`~identify.estimation.consistency.ConsistentFit`,
    :class:`~identify.estimation.payload.PayloadFit`):
    ``fit(W, y, *, mask=None, names=None, joint_names=None)`` with the regressor W (N, n, p),
    the torques y (N, n) [N*m] and, keyword-only, what describes these data: the samples used
    (mask (N, n) bool), the p column names and the n joint names (for messages and ``names_``);
  - the joint models (:class:`~identify.estimation.simplified.SimplifiedModel`,
    :class:`~identify.estimation.improved.ImprovedModel`): ``fit(processed, *, W=None)`` with the
    processed data (:class:`~identify.estimation.processing.Processed`) and optionally their
    precomputed design W (N, n, p), shared between the two models.
* what ``fit`` learns is stored in attributes ending in ``_`` (``params_`` always); ``predict``
  before ``fit`` raises :class:`NotFittedError`.
* :meth:`~EstimatorMixin.get_params` / :meth:`~EstimatorMixin.set_params` read and change the
  settings (``estimator__serial`` reaches the settings of a nested estimator), ``repr`` shows the
  settings that differ from their defaults, and :func:`clone` makes an unfitted copy.

``tests/estimation/test_common.py`` runs every fitter through these rules.
"""
from __future__ import annotations

import inspect

import numpy as np

__all__ = ["EstimatorMixin", "NotFittedError", "check_is_fitted", "clone"]


class NotFittedError(RuntimeError, AttributeError):
    """An estimator was used (predict, a fitted attribute) before :meth:`fit`."""


def _param_names(cls) -> list[str]:
    """The settings of `cls`: the named parameters of its ``__init__`` (no *args / **kwargs)."""
    init = cls.__init__
    if init is object.__init__:
        return []
    sig = inspect.signature(init)
    bad = [p.name for p in sig.parameters.values()
           if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if bad:
        raise TypeError(f"{cls.__name__}.__init__ takes *{bad[0]}: an estimator's settings must "
                        f"be named parameters")
    return [p for p in sig.parameters if p != "self"]


def _defaults(cls) -> dict:
    sig = inspect.signature(cls.__init__)
    return {k: p.default for k, p in sig.parameters.items()
            if k != "self" and p.default is not p.empty}


def _same(a, b) -> bool:
    """True if a setting equals its default (arrays element-wise; never raises)."""
    if a is b:
        return True
    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return bool(np.array_equal(a, b))
        return bool(a == b) and type(a) is type(b)
    except Exception:                               # noqa: BLE001 -- any odd __eq__: differs
        return False


def _short(v) -> str:
    """A setting's value in a repr: arrays by shape, large objects by their type."""
    if isinstance(v, np.ndarray):
        return repr(v.tolist()) if v.size <= 6 else f"<array {v.shape}>"
    text = repr(v)
    if len(text) > 60 or "\n" in text:
        return f"<{type(v).__name__}>"
    return text


class EstimatorMixin:
    """get_params / set_params / repr from the ``__init__`` signature (see the module doc)."""

    def get_params(self, deep: bool = True) -> dict:
        """{setting: value} of this estimator; with `deep`, also ``name__setting`` of settings
        that are estimators themselves."""
        out = {}
        for name in _param_names(type(self)):
            value = getattr(self, name)
            out[name] = value
            if deep and isinstance(value, EstimatorMixin):
                out.update({f"{name}__{k}": v for k, v in value.get_params(deep=True).items()})
        return out

    def set_params(self, **params) -> "EstimatorMixin":
        """Change settings (``name__setting`` for a nested estimator's); returns self.
        ValueError naming the unknown setting and the valid ones."""
        valid = _param_names(type(self))
        nested: dict[str, dict] = {}
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(f"{type(self).__name__} has no setting {name!r}; its settings: "
                                 f"{valid}")
            if sub:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, sub in nested.items():
            inner = getattr(self, name)
            if not isinstance(inner, EstimatorMixin):
                raise ValueError(f"{type(self).__name__}.{name} is {inner!r}, not an estimator: "
                                 f"cannot set {sorted(sub)} on it")
            inner.set_params(**sub)
        return self

    def __repr__(self) -> str:
        defaults = _defaults(type(self))
        shown = [f"{k}={_short(v)}" for k, v in self.get_params(deep=False).items()
                 if k not in defaults or not _same(v, defaults[k])]
        return f"{type(self).__name__}({', '.join(shown)})"


def clone(estimator, /, **params):
    """A new, unfitted estimator with the same settings (nested estimators cloned too), some of
    them replaced by `params`. Other settings (models, arrays) are shared, not copied."""
    settings = {k: (clone(v) if isinstance(v, EstimatorMixin) else v)
                for k, v in estimator.get_params(deep=False).items()}
    settings.update(params)
    return type(estimator)(**settings)


def check_is_fitted(estimator, attribute: str = "params_") -> None:
    """Raise :class:`NotFittedError` unless `estimator` has the fitted `attribute`."""
    if attribute not in vars(estimator):
        raise NotFittedError(f"{type(estimator).__name__} is not fitted yet; call fit first")

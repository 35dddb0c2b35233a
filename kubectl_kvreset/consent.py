"""The one consent rule for every deletion that may reach what pods outside the targets use.

Pure. Used by the FS tier (:mod:`kubectl_kvreset.fs`), LMCache's local disk
(:mod:`kubectl_kvreset.job.storedisk`), the stores (Redis/Valkey, Mooncake, the LMCache MP server,
InfiniStore, the LMCache controller: :func:`kubectl_kvreset.stores.calls.plan_calls`) and the
resets whose hook is store-wide (:mod:`kubectl_kvreset.job.resetconsent`). Each caller says who
uses the store or volume (:class:`User`) and what the deletion removes (the whole store, or one
model's data); :func:`hold` says whether it needs the user's consent:

- a **store-wide** deletion (every key, file or object) goes ahead without a flag only when no
  pod outside the targets uses the store and no namespace that cannot be listed might;
- a **per-model** deletion (one model's keys, files or directories) goes ahead without a flag only
  when no pod outside the targets serves that model there: not by the same name, not by a name
  whose data cannot be told apart (``alike``: LMCache writes ``/`` as ``-``), not with a model
  that cannot be read, not from a place the plugin cannot evaluate, and no namespace that cannot
  be listed might hold one. A pod outside the targets that serves another model keeps its data
  (:func:`kept`) and needs no consent; one that serves no model (not a vLLM pod) counts only
  against a store-wide deletion.

The flag is :data:`SHARED_FLAG` (``--shared-stores``); for the FS tier, ``--whole-tier`` also
gives it (it deletes every entry anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["SHARED_FLAG", "UNLISTED", "Hold", "User", "hold", "kept", "unlisted_user"]

#: The flag that gives consent to delete what pods outside the targets use.
SHARED_FLAG = "--shared-stores"

#: How the pods of namespaces that could not be listed are named among a store's users.
UNLISTED = "pods of namespaces that cannot be listed"


@dataclass(frozen=True)
class User:
    """A pod outside the targets that uses a store or volume (or may).

    Attributes:
        name: ``ns/pod`` (or the entry standing for namespaces that cannot be listed).
        model: the model it serves there; None when it cannot be read.
        serves: False for a pod that runs no vLLM (it mounts the volume, serves no model).
        unsure: why where it writes is not known (a directory not evaluated), or None.
        listed: False for the stand-in of namespaces that cannot be listed.
    """

    name: str
    model: str | None = None
    serves: bool = True
    unsure: str | None = None
    listed: bool = True

    def shown(self) -> str:
        """``ns/pod (model M)``, ``ns/pod (model unknown)``, the name alone for a non-vLLM pod."""
        if not self.listed or not self.serves:
            return self.name
        return f"{self.name} ({self.model or 'model unknown'})"


def unlisted_user(entry: str = UNLISTED) -> User:
    """The :class:`User` standing for the pods of namespaces that could not be listed."""
    return User(entry, None, listed=False)


@dataclass(frozen=True)
class Hold:
    """Why a deletion needs :data:`SHARED_FLAG`.

    Attributes:
        why: ``"others"`` (store-wide: pods outside the targets use the store), ``"same"``
            (they serve the model), ``"alike"`` (their data is named as the model's),
            ``"unsure"`` (where they write is not known), ``"unlisted"`` (namespaces that cannot
            be listed may hold users).
        users: the users that hold it back, in the callers' order.
    """

    why: str
    users: tuple[User, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The users' names (``ns/pod``)."""
        return tuple(u.name for u in self.users)


def _same(user: User, model: str, alike: Callable[[str, str], bool] | None) -> bool:
    return user.model is None or user.model == model or (alike is not None and alike(user.model, model))


def hold(users: Sequence[User], *, model: str | None = None, given: bool,
         alike: Callable[[str, str], bool] | None = None) -> Hold | None:
    """Whether a deletion needs consent, and why (None: it may go ahead).

    Args:
        users: the pods outside the targets that use the store or volume (module docstring),
            :func:`unlisted_user` among them when some namespaces could not be listed.
        model: None for a store-wide deletion; the model whose data a per-model one removes.
        given: the consent flag was given (then nothing holds).
        alike: ``alike(other, model)``: True when ``other``'s data cannot be told from
            ``model``'s (LMCache's disk files: :func:`kubectl_kvreset.stores.lmcachekey.may_write_as`).

    The first reason that applies is given: ``others`` (store-wide) or ``same``, ``alike``,
    ``unsure`` (per model), then ``unlisted``. Never raises.
    """
    if given:
        return None
    listed = [u for u in users if u.listed]
    unlisted = tuple(u for u in users if not u.listed)
    if model is None:
        if listed:
            return Hold("others", tuple(listed))
    else:
        serving = [u for u in listed if u.serves]
        for why, found in (
                ("same", [u for u in serving if u.unsure is None and (u.model is None or u.model == model)]),
                ("alike", [u for u in serving if u.unsure is None and u.model is not None and u.model != model
                           and alike is not None and alike(u.model, model)]),
                ("unsure", [u for u in serving if u.unsure is not None and _same(u, model, alike)])):
            if found:
                return Hold(why, tuple(found))
    if unlisted:
        return Hold("unlisted", unlisted)
    return None


def kept(users: Sequence[User], model: str | None, *,
         alike: Callable[[str, str], bool] | None = None) -> tuple[User, ...]:
    """The listed users whose data a per-model deletion of ``model`` keeps (they serve another
    model, or none); empty for a store-wide one (``model`` None), which keeps nobody's."""
    if model is None:
        return ()
    return tuple(u for u in users if u.listed and (not u.serves or not _same(u, model, alike)))

"""Watches and streamed answers of the API server: ``?watch=true`` as JSON-lines events (or
Table rows) from the moment it starts, chunked transfer encoding."""

from __future__ import annotations

import json
import queue
import ssl
import time
from collections.abc import Iterator
from typing import Any

from .apibase import _Handler
from .apitables import (
    table_for,
)
from .resourcetypes import Obj, ResourceType
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector
from .store import Event


class WatchHandlers:
    """Watches and chunked streams (a mixin of :class:`tests.sim.server.SimServer`)."""

    @staticmethod
    def _send_stream(h: _Handler, chunks: Iterator[bytes]) -> None:
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("Cache-Control", "no-cache, private")
            h.end_headers()
            h.wfile.flush()
            for c in chunks:
                h.wfile.write(f"{len(c):x}\r\n".encode() + c + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            h.close_connection = True
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def _watch(self, rtype: ResourceType, ns: str | None, query: dict[str, str],
               as_table: bool = False) -> Iterator[bytes]:
        """Watch events as JSON lines: ADDED for every current match unless a non-zero
        ``resourceVersion`` is given, then every later change that matches, until
        ``timeoutSeconds`` (default 1800) or the server stops; with ``as_table`` each object is
        a one-row Table (what ``kubectl get -w`` asks for). A change before the watch began
        but after the given resourceVersion is not replayed (no event history is kept)."""
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        q: queue.Queue[Event] = queue.Queue()

        def listener(ev: Event) -> None:
            if ev.rtype is rtype:
                q.put(ev)

        self.store.subscribe(listener)
        try:
            if query.get("resourceVersion", "0") in ("", "0"):
                for o in self.store.list(rtype, ns, labels, fields):
                    yield self._watch_line("ADDED", rtype, o, as_table, query)
            end = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
            while not self._stopping and time.monotonic() < end:
                try:
                    ev = q.get(timeout=min(0.5, max(end - time.monotonic(), 0.01)))
                except queue.Empty:
                    continue
                md = ev.obj.get("metadata", {})
                if ns is not None and rtype.namespaced and md.get("namespace") != ns:
                    continue
                if not labels_match(labels, md.get("labels")) or \
                        not fields_match(fields, ev.obj):
                    continue
                yield self._watch_line(ev.type, rtype, ev.obj, as_table, query)
        finally:
            self.store.unsubscribe(listener)

    def _served(self, rtype: ResourceType, obj: Obj) -> Obj:
        """``obj`` as the server returns it: a copy without the ``drop_fields`` of its
        resource (the fault), else ``obj`` itself."""
        paths = self.drop_fields.get(rtype.plural)
        if not paths or not isinstance(obj, dict):
            return obj
        out: Obj = json.loads(json.dumps(obj))
        for path in paths:
            node: Any = out
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(path[-1], None)
        return out

    def _watch_line(self, etype: str, rtype: ResourceType, obj: Obj, as_table: bool,
                    query: dict[str, str]) -> bytes:
        obj = self._served(rtype, obj)
        out = table_for(rtype, [obj], obj["metadata"].get("resourceVersion", ""),
                        query.get("includeObject", "Metadata")) if as_table else obj
        return json.dumps({"type": etype, "object": out}, separators=(",", ":")).encode() + b"\n"

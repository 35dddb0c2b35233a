"""Splitting a script into its simple commands and the separators between them, the way the
shell's token recognition sees them (POSIX XCU 2.3 "Token Recognition", 2.9.3 "Lists"): quotes,
``$( )``/``${ }`` nesting, comments, ``\\<newline>`` and here-documents. Pure.
"""

from __future__ import annotations

from .words import HEREDOC_RE, ShellScriptError, ansi_c_end

#: ``(text, before, after)``: a command's text and the separators preceding and ending it
Command = tuple[str, str, str]


class _ListSplitter:
    """One left-to-right pass over a script, collecting :data:`Command` tuples.

    State: the position ``i``, the text of the command being read (``buf``), the open quote,
    the ``$( )``/``${ }`` nesting ``depth`` (separators inside do not end a command), the
    separator that ended the previous command and the here-documents started on the current
    line (``pending``: delimiter, whether ``<<-`` strips leading tabs).
    """

    def __init__(self, script: str) -> None:
        self.script = script
        self.n = len(script)
        self.i = 0
        self.buf: list[str] = []
        self.quote: str | None = None
        self.depth = 0
        self.last_sep = ""
        self.pending: list[tuple[str, bool]] = []
        self.cmds: list[Command] = []

    def run(self) -> list[Command]:
        """Read the whole script; raises :class:`ShellScriptError` on an unbalanced quote."""
        while self.i < self.n:
            c = self.script[self.i]
            nxt = self.script[self.i + 1] if self.i + 1 < self.n else ""
            if self.quote == "'":
                self._single_quoted(c)
            elif c == "\\":
                self._backslash(c, nxt)
            elif self.quote == '"':
                self._double_quoted(c, nxt)
            else:
                self._unquoted(c, nxt)
        if self.quote is not None:
            raise ShellScriptError(f"shell script: unbalanced {self.quote} quote")
        self._flush()
        return self.cmds

    def _keep(self, text: str, advance: int) -> None:
        """Add ``text`` to the current command and move ``advance`` characters on."""
        self.buf.append(text)
        self.i += advance

    def _flush(self, sep: str = "") -> None:
        """End the current command at separator ``sep``. An empty command keeps the separator
        before it unless ``sep`` joins commands (``&&``, ``||``, ``|``), which then precedes
        the next one."""
        text = "".join(self.buf).strip()
        if text:
            self.cmds.append((text, self.last_sep, sep))
            self.last_sep = sep
        elif sep in ("&&", "||", "|"):
            self.last_sep = sep
        self.buf.clear()

    def _single_quoted(self, c: str) -> None:
        """Inside ``'...'`` everything is literal up to the closing quote."""
        if c == "'":
            self.quote = None
        self._keep(c, 1)

    def _backslash(self, c: str, nxt: str) -> None:
        """A backslash outside single quotes: ``\\<newline>`` disappears, any other pair is kept."""
        if nxt == "\n":
            self.i += 2
        else:
            self._keep(c + nxt, 2)

    def _double_quoted(self, c: str, nxt: str) -> None:
        """Inside ``"..."``: the closing quote, and ``$( )`` nesting (its separators are inside)."""
        self.buf.append(c)
        if c == '"':
            self.quote = None
        elif c == "$" and nxt == "(":
            self.depth += 1
            self.buf.append(nxt)
            self.i += 1
        elif c == ")" and self.depth > 0:
            self.depth -= 1
        self.i += 1

    def _unquoted(self, c: str, nxt: str) -> None:
        """Outside quotes: ``$'...'``, an opening quote, a comment, nesting, then at depth 0 the
        operators that end a command; anything else is part of it."""
        if c == "$" and nxt == "'":
            end = ansi_c_end(self.script, self.i + 2)
            if end == -1:
                raise ShellScriptError("shell script: unbalanced $' quote")
            self._keep(self.script[self.i:end + 1], end + 1 - self.i)
        elif c in "'\"":
            self.quote = c
            self._keep(c, 1)
        elif c == "#" and (not self.buf or self.buf[-1][-1:].isspace() or self.buf[-1][-1:] in ";&|()"):
            # a comment runs to the end of the line; the newline still ends the command
            end = self.script.find("\n", self.i)
            self.i = self.n if end == -1 else end
        elif not self._nesting(c, nxt) and not (self.depth == 0 and self._operator(c, nxt)):
            self._keep(c, 1)

    def _nesting(self, c: str, nxt: str) -> bool:
        """Track ``$(``, ``${`` and the parentheses and braces inside them; True when ``c`` was one."""
        if c == "$" and nxt in "({":
            self.depth += 1
            self._keep(c + nxt, 2)
        elif c == "(" and self.depth > 0:
            self.depth += 1
            self._keep(c, 1)
        elif c in ")}" and self.depth > 0:
            self.depth -= 1
            self._keep(c, 1)
        else:
            return False
        return True

    def _operator(self, c: str, nxt: str) -> bool:
        """At depth 0: a here-document operator, or a separator (newline, ``;``, ``&&``, ``||``,
        ``|``, a lone ``&`` that is not part of a redirection) ending the command; True when
        ``c`` was handled."""
        if c == "<" and nxt == "<" and self.script[self.i + 2:self.i + 3] != "<":
            self._heredoc_operator(c)
        elif c in "\n;":
            self._flush(c)
            self.i += 1
            if c == "\n" and self.pending:
                self._skip_heredoc_bodies()
        elif c == "&" and nxt == "&":
            self._flush("&&")
            self.i += 2
        elif c == "|":
            self._flush("||" if nxt == "|" else "|")
            self.i += 2 if nxt == "|" else 1
        elif c == "&" and nxt != ">" and not (self.buf and self.buf[-1].endswith((">", "<"))):
            self._flush("&")
            self.i += 1
        else:
            return False
        return True

    def _heredoc_operator(self, c: str) -> None:
        """``<<WORD``, ``<<-WORD``, ``<<'WORD'``: its lines are data for the command, not
        commands (XCU 2.7.4); remember the delimiter for the end of the line."""
        m = HEREDOC_RE.match(self.script, self.i)
        if m is None:
            self._keep(c, 1)
            return
        self.pending.append((m.group(2) or m.group(3) or m.group(4), bool(m.group(1))))
        self._keep(self.script[self.i:m.end()], m.end() - self.i)

    def _skip_heredoc_bodies(self) -> None:
        """After the newline ending a line with here-documents, skip each body up to and
        including its delimiter line (leading tabs stripped for ``<<-``), in order."""
        for word, strip_tabs in self.pending:
            while self.i < self.n:
                end = self.script.find("\n", self.i)
                line = self.script[self.i:self.n if end == -1 else end]
                self.i = self.n if end == -1 else end + 1
                if (line.lstrip("\t") if strip_tabs else line) == word:
                    break
        self.pending.clear()


def split_list(script: str) -> list[Command]:
    """:func:`split_commands` with the separators: ``(text, before, after)`` where
    ``before``/``after`` is the separator preceding/ending the command (a newline, ``";"``,
    ``"&&"``, ``"||"``, ``"|"``, ``"&"``, ``""`` at the ends). The lines of a here-document
    (``<<WORD`` ... ``WORD``) are skipped: they are the command's input, not commands.

    Raises:
        ShellScriptError: unbalanced quotes.
    """
    return _ListSplitter(script).run()


def split_commands(script: str) -> list[str]:
    """Split a script into simple commands; drop comments and ``\\<newline>`` pairs.

    Separators (outside quotes and ``$( )``/``${ }``): newline, ``;``, ``&&``, ``||``, ``|``
    and a lone ``&``. Quoting is kept in the returned texts.

    Raises:
        ShellScriptError: unbalanced quotes.
    """
    return [text for text, _, _ in split_list(script)]

"""The dashboard's navigation: follow, jumps (errors, checkpoints), tabs, help, back; search (``/`` ``n`` ``N``) and go to (``:``)."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from textual import work
from textual.worker import get_current_worker

from .dashboard_state import DashboardState
from .pane_tabs import Panes

if TYPE_CHECKING:
    from ..views.filters import RowFilter
    from .prompt import Prompt


class Navigation(DashboardState):
    """Moving the cursor: jumps, search, go to; the prompt's answers."""

    # ------------------------------------------------------------------ navigation actions
    def action_toggle_follow(self) -> None:
        tl = self.timeline
        if self.replay:
            self.notify("replay mode: follow is off (the run is finished)")
            return
        tl.follow = not tl.follow
        if tl.follow:
            tl.move_to(self.model.rows - 1, keep_follow=True)

    def _seq_row(self, seqs: list[int], row: int, forward: bool, limit: int = 100_000) -> int | None:
        """The row of the nearest of ``seqs`` (sorted) after (before) ``row`` that has a row of its own
        (a filter may hide some); ``None`` if there is none."""
        m = self.model
        if forward:
            i = bisect.bisect_right(seqs, row, key=m.row_of_seq)
            for s in seqs[i : i + limit]:
                if m.filter is None or m.passes(s):
                    return m.row_of_seq(s)
            return None
        i = bisect.bisect_left(seqs, row, key=m.row_of_seq)
        for s in reversed(seqs[max(0, i - limit) : i]):
            if m.filter is None or m.passes(s):
                return m.row_of_seq(s)
        return None

    def _jump(self, seqs: list[int], forward: bool, what: str, rows: list[int] | None = None) -> None:
        """Move to the next (previous) of ``seqs`` or of the extra ``rows`` (supervisor rows)."""
        cur = self.timeline.cursor if self.model.rows else -1
        cands = [r for r in (self._seq_row(seqs, cur, forward),) if r is not None]
        if rows:
            i = bisect.bisect_right(rows, cur) if forward else bisect.bisect_left(rows, cur) - 1
            if 0 <= i < len(rows):
                cands.append(rows[i])
        if not cands:
            more = "" if self.model.scanned else " (still indexing)"
            hidden = " the filter shows" if self.model.filter is not None else ""
            self.notify(f"no {'next' if forward else 'previous'} {what}{hidden}{more}", severity="warning")
            return
        self.timeline.move_to(min(cands) if forward else max(cands))

    def action_error(self, direction: int) -> None:
        self._jump(self.model.error_seqs, direction > 0, "error", self.model.error_event_rows())

    def action_first_error(self) -> None:
        cands = [r for r in (self._seq_row(self.model.error_seqs, -1, True),) if r is not None]
        cands += self.model.error_event_rows()[:1]
        if not cands:
            hidden = " the filter shows" if self.model.filter is not None else " in this run"
            self.notify(f"no errors{hidden} (failed steps, crashes, hangs, give-ups)", severity="warning")
            return
        self.timeline.move_to(min(cands))

    def action_checkpoint(self, direction: int) -> None:
        self._jump(self.model.checkpoint_seqs, direction > 0, "checkpoint")

    def action_tab(self, tab: str) -> None:
        self.query_one(Panes).active = tab

    def action_help(self) -> None:
        from .help_screen import HelpScreen

        self.app.push_screen(HelpScreen(self.replay))

    def action_back(self) -> None:
        """``q``: back to the runs list, or quit from the first screen (a filter or search stays as it is)."""
        if self.prompt.is_open:
            self.prompt.action_close()
            return
        if len(self.app.screen_stack) > 1:  # opened from the runs list (the bottom screen)
            self.app.pop_screen()
        else:
            self.app.exit()

    def _over_the_list(self) -> bool:
        """This screen was opened from the runs list (a screen under it; a modal over it does not count)."""
        stack = self.app.screen_stack
        return self in stack and stack.index(self) > 0

    def _pane_focused(self) -> bool:
        """A widget other than the timeline has the focus (a detail pane)."""
        return self.focused is not None and self.focused is not self.timeline

    def can_close(self) -> bool:
        """Whether Esc has something to close: a pane's focus, the search, the filter, this screen (an open prompt
        closes itself: its own Esc comes first)."""
        return self._pane_focused() or bool(self.search_query) or self.filter_pass is not None or self._over_the_list()

    def action_close(self) -> None:
        """Esc closes the innermost thing open, one a press, and never quits (lazygit, k9s and lnav do not):
        the prompt, then a pane's focus (back to the timeline), the search, the filter, then this screen when the
        runs list opened it. With nothing open the key's second binding says that q quits."""
        if self.prompt.is_open:
            self.prompt.action_close()
        elif self._pane_focused():
            self.timeline.focus()
        elif self.search_query:
            self.clear_search()
        elif self.filter_pass is not None:
            self.action_clear_filter()
        elif self._over_the_list():
            self.app.pop_screen()
        self.refresh_bindings()

    def clear_search(self) -> None:
        """Forget the search: its matches are no longer marked, n and N have none (a running one is cancelled)."""
        self.workers.cancel_group(self, "search")
        self.search_query = ""
        self.search_hits = []
        self.timeline.matches = set()
        self.timeline.refresh()
        self.notify("search cleared", timeout=2)

    # ------------------------------------------------------------------ prompt: search and go to
    def action_search(self) -> None:
        from ..views.filters import SYNTAX

        self.prompt.open("search", f"search: {SYNTAX}; smart case; Enter runs, Esc cancels")

    def action_goto(self) -> None:
        self.prompt.open("goto", "go to seq (a number, or a checkpoint name), Enter to jump")

    def on_prompt_closed(self, message: Prompt.Closed) -> None:
        self.timeline.focus()
        self.refresh_bindings()

    def on_prompt_opened(self, message: Prompt.Opened) -> None:
        self.refresh_bindings()

    def on_prompt_entered(self, message: Prompt.Entered) -> None:
        if message.mode == "search":
            self.start_search(message.text)
        elif message.mode == "goto":
            self.goto(message.text)
        elif message.mode == "filter":
            if message.text:
                self.apply_filter(message.text)
            else:
                self.action_clear_filter()
        elif message.mode == "export":
            self.export_to(message.text)

    def goto(self, text: str) -> None:
        if text.lstrip("-").isdigit():
            seq = int(text)
            if seq < 0:
                seq += self.model.count
            if not 0 <= seq < self.model.count:
                self.notify(f"no record {text}: seqs go from 0 to {self.model.count - 1}", severity="error")
                return
            if self.model.filter is not None and not self.model.passes(seq) and not self.model.is_hidden(seq):
                self.notify(f"#{seq} is hidden by the filter: the next row it shows is selected (Esc clears it)", severity="warning")
            self.timeline.move_to_seq(seq)
            return
        for s in reversed(self.model.checkpoint_seqs):
            m = self.model.marker(s)
            if m is not None and text in (m.name, m.file):
                self.timeline.move_to_seq(s)
                return
        self.notify(f"{text!r} is neither a seq nor a checkpoint name", severity="error")

    def start_search(self, text: str) -> None:
        """Parse the query with the filter's parser (one syntax for both) and search in a worker."""
        from ..views.filters import parse_filter

        try:
            flt = parse_filter(text)
        except ValueError as e:
            self.notify(str(e), severity="error", timeout=8)
            return
        self.search_query = flt.text
        self.notify(f"searching for {flt.describe()}…", timeout=2)
        self.run_search(flt)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def run_search(self, flt: RowFilter) -> None:
        """Test every committed record against the query in a thread (the filter's forward pass, from the start)."""
        from ..views.filters import new_pass

        worker = get_current_worker()
        hits, _ = new_pass(flt, self.path).advance(lambda: worker.is_cancelled)
        if not worker.is_cancelled:
            self.app.call_from_thread(self._search_done, flt, hits)

    def _shown_hits(self, hits: list[int]) -> int:
        """How many hits have a row: a begin folded into its step's row is found in the step's record (the SDK's
        step record repeats its begin's name and inputs), so it is not counted, nor gone to, twice."""
        m = self.model
        return sum(1 for s in hits if not m.is_folded_begin(s))

    def _search_done(self, flt: RowFilter, hits: list[int]) -> None:
        if flt.text != self.search_query:
            return  # cleared (Esc) or replaced since
        self.search_hits = hits
        self.timeline.matches = set(hits)
        self.timeline.refresh()
        n = self._shown_hits(hits)
        if not n:
            self.notify(f"no match for {flt.describe()}", severity="warning")
            return
        self.notify(f"{n} match{'es' if n != 1 else ''} for {flt.describe()} (n / N, Esc clears)", timeout=8)
        if self.model.filter is not None:  # within the filter: the matches it shows
            row = self._seq_row(hits, self.timeline.cursor - 1, True)
            row = row if row is not None else self._seq_row(hits, -1, True)
            if row is None:
                self.notify("the filter hides every match: Esc clears it", severity="warning")
            else:
                self.timeline.move_to(row)
            return
        cur = self.timeline.selected_seq() or 0
        nxt = self._next_hit(cur - 1, True)
        self.timeline.move_to_seq(nxt if nxt is not None else self._next_hit(-1, True) or hits[0])

    def _next_hit(self, seq: int, forward: bool) -> int | None:
        """The next (previous) hit after ``seq`` that has a row of its own (not a folded begin); ``None``: none."""
        m = self.model
        while True:
            target = m.next_in(self.search_hits, seq, forward)
            if target is None or not m.is_folded_begin(target):
                return target
            seq = target

    def action_search_next(self, direction: int) -> None:
        if not self.search_hits:
            self.notify("no search yet: press / to search", severity="warning")
            return
        if self.model.filter is not None:
            fwd = direction > 0
            row = self._seq_row(self.search_hits, self.timeline.cursor, fwd)
            if row is None:
                row = self._seq_row(self.search_hits, -1 if fwd else self.model.rows, fwd)
                if row is not None:
                    self.notify("search wrapped", timeout=1)
            if row is None:
                self.notify("the filter hides every match: Esc clears it", severity="warning")
            else:
                self.timeline.move_to(row)
            return
        cur = self.timeline.selected_seq() or 0
        fwd = direction > 0
        target = self._next_hit(cur, fwd)
        if target is None:  # wrap around, as less does with a message
            target = self._next_hit(-1 if fwd else self.search_hits[-1] + 1, fwd)
            self.notify("search wrapped", timeout=1)
        if target is None:
            return
        small = len(self.search_hits) < 100_000
        k = self._shown_hits(self.search_hits[: self.search_hits.index(target) + 1]) if small else None
        self.timeline.move_to_seq(target)
        if k is not None:
            self.notify(f"match {k} of {self._shown_hits(self.search_hits)}", timeout=1)

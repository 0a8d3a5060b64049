"""The dashboard's navigation: follow, jumps (errors, checkpoints), tabs, help, back; search (``/`` ``n`` ``N``) and go to (``:``)."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from textual import work
from textual.worker import get_current_worker

from ..views.scan import Region, search_journal, search_regions
from .dashboard_state import DashboardState
from .pane_tabs import Panes

if TYPE_CHECKING:
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
        prompt = self.prompt
        if prompt.is_open:
            prompt.action_close()
            return
        if self.filter_pass is not None:  # Esc clears the filter first (q too: never quit from a filtered view)
            self.action_clear_filter()
            return
        if len(self.app.screen_stack) > 1:  # opened from the runs list (the bottom screen)
            self.app.pop_screen()
        else:
            self.app.exit()

    # ------------------------------------------------------------------ prompt: search and go to
    def action_search(self) -> None:
        self.prompt.open("search", "search the raw JSON of every record (smart case), Enter to run, Esc to cancel")

    def action_goto(self) -> None:
        self.prompt.open("goto", "go to seq (a number, or a checkpoint name), Enter to jump")

    def on_prompt_closed(self, message: Prompt.Closed) -> None:
        self.timeline.focus()
        self.refresh_bindings()

    def on_prompt_opened(self, message: Prompt.Opened) -> None:
        self.refresh_bindings()

    def on_prompt_entered(self, message: Prompt.Entered) -> None:
        if message.mode == "search":
            self.search_query = message.text
            self.notify(f"searching for {message.text!r}…", timeout=2)
            # a copy of the regions, taken here: the UI thread appends to them as records come
            self.run_search(message.text, list(self.model.regions) if self.model.scanned else None)
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

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def run_search(self, query: str, regions: list[Region] | None) -> None:
        """Search every record's raw text in a thread (the scan's regions, else the whole journal)."""
        worker = get_current_worker()

        def cancelled() -> bool:
            return worker.is_cancelled

        if regions is not None:
            hits = search_regions(regions, query, cancelled)
        else:
            hits = search_journal(self.path, query, cancelled)
        if not worker.is_cancelled:
            self.app.call_from_thread(self._search_done, query, hits)

    def _search_done(self, query: str, hits: list[int]) -> None:
        self.search_hits = hits
        self.timeline.matches = set(hits)
        self.timeline.refresh()
        if not hits:
            self.notify(f"no match for {query!r}", severity="warning")
            return
        self.notify(f"{len(hits)} match{'es' if len(hits) != 1 else ''} for {query!r} (n / N)", timeout=8)
        if self.model.filter is not None:  # within the filter: the matches it shows
            row = self._seq_row(hits, self.timeline.cursor - 1, True)
            row = row if row is not None else self._seq_row(hits, -1, True)
            if row is None:
                self.notify("the filter hides every match: Esc clears it", severity="warning")
            else:
                self.timeline.move_to(row)
            return
        cur = self.timeline.selected_seq() or 0
        nxt = self.model.next_in(hits, cur - 1, True)
        self.timeline.move_to_seq(nxt if nxt is not None else hits[0])

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
        target = self.model.next_in(self.search_hits, cur, direction > 0)
        if target is None:  # wrap around, as less does with a message
            target = self.search_hits[0] if direction > 0 else self.search_hits[-1]
            self.notify("search wrapped", timeout=1)
        k = self.search_hits.index(target) + 1 if len(self.search_hits) < 100_000 else None
        self.timeline.move_to_seq(target)
        if k is not None:
            self.notify(f"match {k} of {len(self.search_hits)}", timeout=1)

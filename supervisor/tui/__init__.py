"""The Textual TUI: runs list, run dashboard, diff, replay mode. The core never imports this package."""

"""koordctl against a (fake) running koordlet, driven through a real terminal (tmux)."""

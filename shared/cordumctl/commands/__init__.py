"""One module per command group; ``cordumctl.app`` mounts them."""

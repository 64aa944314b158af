"""``python -m hookscope.lsp``: the language server over stdio."""

from .server import main

main()

"""The terminal front end: `hookscope run` (the CLI), its Python stand-in for the editor, a DAP client for debugpy's adapter, the debug sessions of a run, and the --report writer."""

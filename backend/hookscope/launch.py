"""``python -m hookscope.launch script.py args…``: the public entry point for attaching; the work is in debugger/launch.py."""

from hookscope.debugger.launch import main

if __name__ == "__main__":
    main()

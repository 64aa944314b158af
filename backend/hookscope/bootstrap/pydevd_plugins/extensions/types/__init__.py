# Namespace package shared with pydevd's own type plugins (pydevd walks it with pkgutil).
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

# Namespace package shared with pydevd's own plugins (pydevd looks them up with pkgutil).
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

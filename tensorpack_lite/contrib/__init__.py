"""Optional integrations with other libraries, above the training stack. Nothing is imported
here: import a submodule (``tensorpack_lite.contrib.keras``) to use it."""

__all__ = []

"""A debugging aid: print every Python function call as it happens."""

import sys

__all__ = ['enable_call_trace']

# Calls that printing itself makes; tracing them would only add noise.
_UNTRACED = frozenset(['write', 'print', 'flush'])


def _print_call(frame, event, arg):
    if event != 'call' or frame.f_code.co_name in _UNTRACED:
        return None
    code, caller = frame.f_code, frame.f_back
    if caller is not None:
        print("Call to `{}` on line {}:{} from {}:{}".format(
            code.co_name, code.co_filename, frame.f_lineno, caller.f_code.co_filename, caller.f_lineno))
    return None   # no line-by-line tracing inside the call


def enable_call_trace():
    """From now on, print one line for each Python function called in this thread: its name
    and place, and where it was called from. ``sys.settrace(None)`` turns it off.

    Example::

        enable_call_trace()
        build_graph()          # prints "Call to `build_graph` on line model.py:10 from run.py:3" ...
        sys.settrace(None)
    """
    sys.settrace(_print_call)

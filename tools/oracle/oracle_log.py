"""What the oracles (whisper.py, parakeet.py) share: a log that goes to the console and to
$OUT/log.txt line by line (so that a killed run still leaves it), transformers' messages and
Python warnings routed into that log and kept, and the transformers sources packed for reading.

The oracles run as scripts (python3 tools/oracle/NAME.py), so this folder is on sys.path.
"""
import os
import tarfile


class OracleLog:
    def __init__(self):
        self.path = None  # log.txt; None: the console only
        self.messages = []  # what transformers logged and warned (generate() arguments, ...)

    def __call__(self, *args, quiet=False):
        line = " ".join(str(a) for a in args)
        if not quiet:
            print(line, flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def capture_library_messages(self, warnings_filter):
        """Routes transformers' log messages and Python warnings into log.txt (not the console)
        and keeps them in self.messages; warnings_filter is warnings.simplefilter's action."""
        import logging
        import warnings

        import transformers

        log = self

        class Keep(logging.Handler):
            def emit(self, record):
                message = record.getMessage()
                log.messages.append(message)
                log("[transformers]", message, quiet=True)

        transformers.logging.set_verbosity_warning()
        transformers.logging.disable_default_handler()
        logging.getLogger("transformers").addHandler(Keep())

        def show(message, category, filename, lineno, file=None, line=None):
            log.messages.append(str(message))
            log(f"[{category.__name__}]", message, quiet=True)

        warnings.showwarning = show
        warnings.simplefilter(warnings_filter)


def pack_library_sources(out_dir, archive_name, relative_paths):
    """Packs the transformers sources (paths relative to its package) that define the behaviour an
    oracle records into out_dir/archive_name, for reading. Returns the archive's path."""
    import transformers

    root = os.path.dirname(transformers.__file__)
    path = os.path.join(out_dir, archive_name)
    with tarfile.open(path, "w:gz") as tar:
        for rel in relative_paths:
            full = os.path.join(root, rel)
            if os.path.exists(full):
                tar.add(full, arcname=rel, filter=lambda m: None if "__pycache__" in m.name else m)
    return path

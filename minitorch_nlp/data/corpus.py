"""The built-in text corpus (the Python standard library's docstrings) and ``load_text``.

Every Python install carries its standard library, and its docstrings are a few MB of careful
English prose about programming: enough to train a small language model without a download.
"""
from __future__ import annotations

import codecs
import functools
import importlib
import inspect
import os
import re
import subprocess
import sys
import warnings

# Standard-library modules that every CPython 3.10+ build has on every platform, that import
# without side effects (no printing, no browser, no GUI toolkit) and without deprecation warnings.
# Optional extensions (sqlite3, ssl, lzma, bz2, curses, readline, tkinter, ctypes), platform
# modules (posix, nt, fcntl, winreg ...), modules removed in 3.12/3.13, test packages, idlelib,
# ``this`` and ``antigravity`` are left out. Listed by hand so the corpus is the same on every
# machine with the same Python version.
CORPUS_MODULES = tuple(sorted("""
abc argparse ast asyncio base64 bdb binascii bisect builtins calendar cmath cmd code codecs
codeop collections collections.abc colorsys compileall concurrent.futures configparser contextlib
contextvars copy copyreg csv dataclasses datetime decimal difflib dis doctest email
email.charset email.contentmanager email.encoders email.errors email.generator email.header
email.headerregistry email.iterators email.message email.parser email.policy email.utils enum
filecmp fileinput fnmatch fractions ftplib functools gc genericpath getopt getpass gettext glob
graphlib gzip hashlib heapq hmac html html.parser http http.client http.cookiejar http.cookies
http.server imaplib importlib importlib.abc importlib.machinery importlib.util inspect io ipaddress
itertools json keyword linecache locale logging logging.config logging.handlers mailbox math
mimetypes modulefinder multiprocessing netrc ntpath numbers operator optparse os pathlib pdb
pickle pickletools pkgutil platform plistlib poplib posixpath pprint profile pstats py_compile
pyclbr pydoc queue quopri random re reprlib runpy sched secrets selectors shelve shlex shutil
smtplib socket socketserver stat statistics string struct subprocess symtable sys sysconfig
tabnanny tarfile tempfile textwrap threading time timeit token tokenize trace traceback
tracemalloc types typing unicodedata unittest unittest.mock urllib.error urllib.parse
urllib.request urllib.response urllib.robotparser uuid warnings wave weakref webbrowser
wsgiref.handlers wsgiref.headers wsgiref.simple_server wsgiref.util wsgiref.validate
xml.dom.minidom xml.dom.pulldom xml.etree.ElementTree xml.sax xml.sax.handler xml.sax.saxutils
xmlrpc.client xmlrpc.server zipapp zipfile zipimport zlib zoneinfo
""".split()))


def _clean(doc) -> str:
    """A docstring with its indentation removed and its whitespace normalised."""
    if not isinstance(doc, str):
        return ""
    lines = [line.rstrip() for line in inspect.cleandoc(doc).splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _documented(owner: str, obj) -> bool:
    """Whether ``obj`` was defined by module ``owner`` (or its C accelerator ``_owner``, or, for
    a package, one of its submodules)."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        return False
    last = owner.rpartition(".")[2]
    return module in (owner, "_" + last) or module.startswith(owner + ".")


def _member_docs(cls) -> list[str]:
    """Docstrings of the methods and properties a class defines itself, by name."""
    docs = []
    for name in sorted(vars(cls)):
        if name.startswith("_") and name != "__init__":
            continue
        member = vars(cls)[name]
        if isinstance(member, (classmethod, staticmethod)):
            member = member.__func__
        if inspect.isroutine(member) or isinstance(member, property):
            docs.append(getattr(member, "__doc__", None))
    return docs


def _module_docs(name: str, module) -> list[str]:
    """The module's docstring, then each public class (with its members) and function it defines,
    by name."""
    docs = [module.__doc__]
    # ``__all__`` too: some packages (concurrent.futures) load names lazily on first access, and
    # what earlier code happened to touch must not change the corpus.
    names = set(vars(module)) | set(getattr(module, "__all__", ()))
    for attribute in sorted(key for key in names if not key.startswith("_")):
        obj = getattr(module, attribute, None)
        if not _documented(name, obj):
            continue
        if inspect.isclass(obj):
            docs.append(obj.__doc__)
            docs.extend(_member_docs(obj))
        elif inspect.isroutine(obj):
            docs.append(obj.__doc__)
    return docs


def _collect_docstrings() -> str:
    """The corpus, built from the modules as this process sees them."""
    if sys.flags.optimize >= 2:
        raise RuntimeError("stdlib_corpus: Python runs with -OO, which strips docstrings; run "
                           "without -OO or pass your own text file to load_text(path)")
    seen: set[str] = set()
    texts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in CORPUS_MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            for doc in _module_docs(name, module):
                text = _clean(doc)
                if len(text) >= 20 and text not in seen:
                    seen.add(text)
                    texts.append(text)
    return "\n\n".join(texts) + "\n"


@functools.lru_cache(maxsize=1)
def _build_corpus() -> str:
    """Run :func:`_collect_docstrings` in a fresh, isolated interpreter (``-I -S``): what the
    calling process has imported or patched (pytest replaces ``sys.unraisablehook``, for one)
    cannot change the text, and the corpus modules are not imported here. Falls back to this
    process where no interpreter can be started (an embedded Python)."""
    try:
        child = subprocess.run([sys.executable, "-I", "-S", os.path.abspath(__file__)],
                               capture_output=True, check=True, timeout=600)
        return child.stdout.decode("utf-8")
    except (OSError, subprocess.SubprocessError):
        return _collect_docstrings()


def stdlib_corpus(max_chars: int | None = None) -> str:
    """Text made of the docstrings of the standard-library modules in ``CORPUS_MODULES``.

    Modules in alphabetical order; in each, the module docstring, then its public classes (each
    followed by its methods' and properties' docstrings) and functions by name. Indentation is
    removed, trailing spaces stripped, runs of blank lines collapsed to one, docstrings shorter
    than 20 characters or seen before are skipped, and docstrings are separated by a blank line.
    The same Python version on the same platform gives the same text (about 1 MB); it is built
    once per process, in a fresh interpreter, so nothing the caller imported or patched changes
    it. ``max_chars`` keeps only the first ``max_chars`` characters.
    """
    text = _build_corpus()
    if max_chars is not None:
        if max_chars < 0:
            raise ValueError(f"stdlib_corpus: max_chars must be >= 0 or None, got {max_chars}")
        text = text[:max_chars]
    return text


def load_text(path: str | os.PathLike | None = None) -> str:
    """The UTF-8 text of the file at ``path`` (``read_text_file``), or the built-in
    :func:`stdlib_corpus` when ``path`` is None."""
    return stdlib_corpus() if path is None else read_text_file(path)


class TextFileError(ValueError):
    """The text file of a run cannot be used (missing, a directory, not UTF-8, empty)."""


def read_text_file(path, max_chars=None):
    """The text of the UTF-8 file ``path`` (its first ``max_chars`` characters: the rest is not
    read); ``TextFileError`` saying what to change otherwise."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts, length, offset = [], 0, 0
    try:
        with open(path, "rb") as file:
            while max_chars is None or length < max_chars:
                chunk = file.read(_READ_CHUNK)
                try:
                    text = decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as error:
                    at = offset - (len(error.object) - len(chunk)) + error.start
                    raise TextFileError(f"{path} is not UTF-8 text (byte "
                                        f"0x{error.object[error.start]:02x} at offset {at}): "
                                        "re-save it as UTF-8") from None
                parts.append(text)
                length, offset = length + len(text), offset + len(chunk)
                if not chunk:
                    break
    except FileNotFoundError:
        raise TextFileError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise TextFileError(f"{path} is a directory; give a text file") from None
    text = "".join(parts)[:max_chars]
    if not text.strip():
        raise TextFileError(f"{path} holds no text")
    return text


_READ_CHUNK = 1 << 20          # bytes read at a time from a text file


if __name__ == "__main__":  # the isolated child of _build_corpus
    sys.stdout.buffer.write(_collect_docstrings().encode("utf-8"))

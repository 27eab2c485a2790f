# SPDX-License-Identifier: MIT
"""The cases every tokenizer of the GGUF host is checked on against its
reference (tests/gemma3/check_tokenizer.py: SentencePiece;
tests/smollm2/check_tokenizer.py: Hugging Face's tokenizers): texts of
every kind, invalid UTF-8, seeded random byte strings, and the helpers
that run gguf-tokenize on them."""
import codecs
import os
import random
import subprocess
import sys

GPL3 = "/usr/share/common-licenses/GPL-3"

# Texts the host's tokenizer must read as its reference does.
STRINGS = [
    "",
    "Hello world",
    "hello",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "runs  of   spaces    and     more      here",
    " " * 40,
    "a" + " " * 33 + "b",
    " ",
    "line one\nline two\n",
    "\n",
    "\n\n\n",
    "para one\n\n\npara two\n" + "\n" * 35 + "end",
    "\ttab\tseparated\t\tcolumns",
    "\t" * 40 + "x",
    " \n \t \r\n mixed",
    "0 7 42 123 4567 3.14159 -2.5e10 1,000,000 2024-01-31",
    "3.14159 + 2718 = 1234567890",
    "Punctuation: !?.,;:'\"()[]{}<>@#$%^&*-_=+/\\|`~",
    "...---...  !!! ???",
    'def f(x):\n    return {"a": [1, 2, 3]}  # comment\n',
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "<html><body><b>bold</b> <i>it</i></body></html>",
    "<table><tr><td>1</td></tr></table>",
    "x<b>y",
    "<start_of_image>picture<end_of_image>",
    "[multimodal] data",
    "Ünïcödé café naïve résumé façade Ångström",
    "Größe straße ÆØÅ æøå Ça ça",
    "日本語のテキスト",
    "中文文本，标点。",
    "한국어 텍스트",
    "😀🚀👍🏽 emoji 🇫🇷",
    "👨‍👩‍👧‍👦",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "Ελληνικά και русский текст",
    # Byte fallback: characters with no piece of their own.
    "\U00030000\U0002a6d6 \U0001fbf9",
    "\U000e0041\U000e0042 tag characters",
    "\x01\x02\x7f control bytes \x1b[0m",
    "\u200b\u200d\ufeff zero width",
    "\ufffd replacement",
    "The GNU General Public License is a free, copyleft license for "
    "software",
    "  two  spaces\nand\ttabs\n\n",
    "Ünïcödé café naïve 日本語のテキスト 😀🚀",
    # Texts of control pieces are not cut out of plain text. (In Gemma's
    # vocabulary no merge reaches them either: none of them is two pieces
    # put together there; llama.cpp would merge into any piece,
    # SentencePiece only into normal and user-defined ones.)
    "<bos> <mask> <0x41> <unused5> <start_of_image><b>x</b>\x01",
    "<eos><pad><start_of_turn>user\n<end_of_turn>",
    "ab" * 500,
    "The quick brown fox jumps over the lazy dog. " * 20,
]

# Invalid UTF-8, read as SentencePiece reads it: each byte that starts no
# valid character is U+FFFD (examples/gguf/text.h). (llama.cpp cuts
# characters by their first byte alone: with Gemma's vocabulary "\xc3 " is
# its four byte tokens of "\xc3\xe2\x96\x81".)
INVALID = [
    b"\xc3 ",
    b"\xe9 ",
    b"\xdf \xdf \xdf ",
    b"\xe9 " * 1000,
    b"\xff",
    b"\x80\xbf",
    b"\xc0\x80 overlong NUL, \xe0\x80\xaf overlong slash",
    b"\xed\xa0\x80 a surrogate, \xf4\x90\x80\x80 past U+10FFFF, \xf5\xf8",
    b"truncated \xe2\x96 space mark, \xf0\x9f\x98 emoji, \xe6\x97",
    b"\xe2\x96\xe2\x96\x81\xe2",
]

# What the random strings are made of: text, spaces and their runs, valid
# characters of 2-4 bytes, user-defined pieces, control-piece texts (plain
# text here), and invalid UTF-8 of every kind.
PARTS = [
    b"a", b"b", b"the", b"Hello", b"0", b"42", b".", b",", b"<", b">", b"/",
    b" ", b"  ", b"   ", b"\n", b"\n\n", b"\t", b"\r\n", b"\x00", b"\x01",
    "é".encode(), "ß".encode(), "日本".encode(), "😀".encode(),
    "\u200d".encode(), "\ufffd".encode(), "Ω".encode(), "\u2580".encode(),
    b"<b>", b"</td>", b"[multimodal]", b"<bos>", b"<start_of_turn>",
    b"\x80", b"\xbf", b"\xc3", b"\xdf", b"\xe9", b"\xe2\x96", b"\xc0\x80",
    b"\xc1\xbf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5", b"\xfe",
    b"\xff", b"\xf0\x9f\x98",
]


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def random_strings(keep=lambda b: True, seed=20260214, count=400):
    """count byte strings from a fixed seed that keep accepts: a quarter
    made of the valid PARTS, half of any PARTS, a quarter uniformly random
    bytes."""
    rng = random.Random(seed)
    valid = [p for p in PARTS if valid_utf8(p)]
    out = []
    while len(out) < count:
        kind = len(out) % 4
        if kind == 3:
            b = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
        else:
            b = b"".join(rng.choice(valid if kind == 0 else PARTS)
                         for _ in range(rng.randint(1, 30)))
        if keep(b):
            out.append(b)
    return out


def fail(msg):
    print(f"check_tokenizer: FAIL: {msg}")
    sys.exit(1)


def escape(s):
    """s (str or bytes) as one line of C escapes for gguf-tokenize."""
    out = []
    for b in s if isinstance(s, bytes) else s.encode("utf-8"):
        if b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def gg_lines(binary, gguf_path, strings, decode=False, flags=()):
    args = [binary] + (["--decode"] if decode else []) + list(flags) + \
        [gguf_path]
    text = "".join(escape(s) + "\n" for s in strings)
    r = subprocess.run(args, input=text.encode(), capture_output=True)
    if r.returncode != 0:
        fail(f"{' '.join(args)}: exit {r.returncode}: "
             f"{r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode().split("\n")[:len(strings)]


def ids_of(line):
    return [int(x) for x in line.split()]


def compare(what, s, want, got, ref):
    if want == got:
        return
    i = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b),
             min(len(want), len(got)))
    fail(f"{what} {s[:200]!r}: first difference at token {i}\n"
         f"  {ref}: {want[max(0, i - 3):i + 8]} ({len(want)} tokens)\n"
         f"  gguf-tokenize: {got[max(0, i - 3):i + 8]} ({len(got)} tokens)")




def check_gpl3(binary, gguf_path, reference, ref):
    """When /usr/share/common-licenses/GPL-3 is there: gguf-tokenize's ids
    of the whole file (which it checks decode back) against reference(text);
    what was checked, for the summary line, or "" without the file."""
    if not os.path.exists(GPL3):
        return ""
    with open(GPL3, "rb") as f:
        text = f.read().decode("utf-8")
    r = subprocess.run([binary, "--file", GPL3, gguf_path],
                       capture_output=True)
    if r.returncode != 0:
        fail(f"gguf-tokenize --file {GPL3}: "
             f"{r.stderr.decode(errors='replace').strip()}")
    gpl = ids_of(r.stdout.decode())
    compare("file", GPL3, reference(text), gpl, ref)
    return f", GPL-3 ({len(gpl)} tokens; " \
           f"{r.stderr.decode().strip().split(', ')[-1]})"


def per_byte_replacement(error):
    """A decoding error handler: one U+FFFD for the byte that starts no
    valid character, decoding on from the next byte, as the host reads
    invalid UTF-8 (Python's own "replace" puts one for a whole truncated
    character)."""
    return "\ufffd", error.start + 1


codecs.register_error("per_byte_replacement", per_byte_replacement)


def as_host_reads(b):
    """The text of bytes b as the host reads it: each byte that starts no
    valid UTF-8 character as U+FFFD."""
    return b.decode("utf-8", "per_byte_replacement")

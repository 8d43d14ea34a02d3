"""Seat names as a person sees them: what the board refuses, and when two names look the same.

A seat name is kept NFKC-normalized (full-width letters, ligatures and styled letters become the plain ones),
with its spaces collapsed, 1..{MAX} printable characters (``clean``). It is refused when it holds a code point
that draws nothing: Unicode's default-ignorable code points (``DEFAULT_IGNORABLE``: joiners, variation
selectors, fillers, tags, invisible operators) and the blank glyphs (``BLANK``), so "alice" and "alice" plus
U+034F are never two rows that read the same; and when it mixes Latin letters with those of a script whose
letters imitate them (``LOOKALIKE_SCRIPTS``).

Two names look the same when they share a form in ``looks``: Unicode's skeleton (Unicode Technical Standard #39,
section 4: decompose, replace each character by the prototype it is confusable with, decompose again;
``skeleton``), taken of the name and of its case-folded form, so "ALICE", "aIice" (capital I), "a1ice", "AIice"
and an all-Cyrillic "аlice" all look like "alice", while "ali" and "all", or "ivan" and "lvan", do not.

``CONFUSABLES`` (prototype -> the characters confusable with it) is the part of TR39's ``confusables.txt``
(version 10.0.0) whose prototype is ASCII letters and digits and whose character NFKC leaves as it is (what
NFKC folds, e.g. mathematical letters, never reaches the skeleton). ``DEFAULT_IGNORABLE`` is the
``Default_Ignorable_Code_Point`` property of Unicode's ``DerivedCoreProperties.txt`` (15.1). Both are written
out here: the room works offline. The standard library only (the learner's ``room join`` checks a name before
it is sent).
"""

from __future__ import annotations

import unicodedata

MAX = 64                  # characters of a seat name
LOOKALIKE_SCRIPTS = {"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"}

# Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15.1): inclusive ranges.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
# Glyphs that draw nothing but are neither spaces nor default-ignorable.
BLANK = {0x2800: "BRAILLE PATTERN BLANK", 0x1D159: "MUSICAL SYMBOL NULL NOTEHEAD"}

# TR39 confusables.txt 10.0.0, prototype -> characters confusable with it (ASCII prototypes, NFKC-stable sources).
CONFUSABLES = {
    "2": "\u01a7\u03e8\u14bf\ua644\ua6ef\ua75a",
    "3": "\u01b7\u021c\u0417\u04e0\u2ccc\ua76a\ua7ab\U000118ca\U00016f3b\U0001d206",
    "4": "\u13ce\U000118af",
    "5": "\u01bc\U000118bb",
    "6": "\u0431\u13ee\u2cd2\U000118d5",
    "7": "\U000104d2\U000118c6\U0001d212",
    "8": "\u0222\u0223\u09ea\u0a6a\u0b03\U0001031a\U0001e8cb",
    "9": "\u09ed\u0a67\u0b68\u0d6d\u2cca\ua76e\U000118ac\U000118cc\U000118d6",
    "A": "\u0391\u0410\u13aa\u15c5\ua4ee\U000102a0\U00016f40",
    "a": "\u0251\u03b1\u0430\u237a",
    "AA": "\ua732",
    "aa": "\ua733",
    "AE": "\u00c6\u04d4",
    "ae": "\u00e6\u04d5",
    "AO": "\ua734",
    "ao": "\ua735",
    "AR": "\U0001f707",
    "AU": "\ua736",
    "au": "\ua737",
    "AV": "\ua738\ua73a",
    "av": "\ua739\ua73b",
    "AY": "\ua73c",
    "ay": "\ua73d",
    "B": "\u0392\u0412\u13f4\u15f7\ua4d0\ua7b4\U00010282\U000102a1\U00010301",
    "b": "\u0184\u042c\u13cf\u15af",
    "bl": "\u042b",
    "C": "\u0421\u13df\u2ca4\ua4da\U000102a2\U00010302\U00010415\U0001051c\U000118e9\U000118f2\U0001f74c",
    "c": "\u0441\u1d04\u2ca5\uabaf\U0001043d",
    "D": "\u13a0\u15de\u15ea\ua4d3",
    "d": "\u0501\u13e7\u146f\ua4d2",
    "dz": "\u02a3",
    "E": "\u0395\u0415\u13ac\u22ff\u2d39\ua4f0\U00010286\U000118a6\U000118ae",
    "e": "\u0435\u04bd\u212e\uab32",
    "F": "\u03dc\u15b4\ua4dd\ua798\U00010287\U000102a5\U00010525\U000118a2\U000118c2\U0001d213",
    "f": "\u0584\u1e9d\ua799\uab35",
    "G": "\u050c\u13c0\u13f3\ua4d6",
    "g": "\u018d\u0261\u0581\u1d83",
    "H": "\u0397\u041d\u13bb\u157c\u2c8e\ua4e7\U000102cf",
    "h": "\u04bb\u0570\u13c2",
    "i": "\u0131\u0269\u026a\u03b9\u0456\u04cf\u13a5\u2373\ua647\uab75\U000118c3",
    "J": "\u037f\u0408\u13ab\u148d\ua4d9\ua7b2",
    "j": "\u03f3\u0458",
    "K": "\u039a\u041a\u13e6\u16d5\u2c94\ua4d7\U00010518",
    "L": "\u13de\u14aa\u2cd0\ua4e1\U0001041b\U00010526\U000118a3\U000118b2\U00016f16\U0001d22a",
    "l": ("\u0031\u0049\u007c\u0196\u01c0\u0399\u0406\u04c0\u05c0\u05d5\u05df\u0627\u0661\u06f1\u07ca\u16c1"
             "\u2223\u23fd\u2c92\u2d4f\ua4f2\U0001028a\U00010309\U00010320\U00016f28\U0001e8c7"),
    "ll": "\u01c1\u05f0\u2016\u2225",
    "lO": "\u042e",
    "ls": "\u02aa",
    "lt": "\u20b6",
    "lz": "\u02ab",
    "M": "\u039c\u03fa\u041c\u13b7\u15f0\u16d6\u2c98\ua4df\U000102b0\U00010311",
    "MB": "\U0001f76b",
    "N": "\u039d\u2c9a\ua4e0\U00010513",
    "n": "\u0578\u057c",
    "O": ("\u0030\u039f\u041e\u0555\u07c0\u09e6\u0b20\u0b66\u12d0\u2c9e\u2d54\u3007\ua4f3\U00010292"
             "\U000102ab\U00010404\U000104c2\U00010516\U000114d0\U000118b5\U000118e0"),
    "o": ("\u03bf\u03c3\u043e\u0585\u05e1\u0647\u0665\u06be\u06c1\u06d5\u06f5\u0966\u0a66\u0ae6\u0be6\u0c02"
             "\u0c66\u0c82\u0ce6\u0d02\u0d20\u0d66\u0d82\u0e50\u0ed0\u101d\u1040\u10ff\u1d0f\u1d11\u2c9f\uab3d"
             "\U0001042c\U000104ea\U000118c8\U000118d7"),
    "OE": "\u0152",
    "oe": "\u0153",
    "OO": "\ua698\ua74e",
    "oo": "\u221e\ua699\ua74f",
    "P": "\u03a1\u0420\u13e2\u146d\u2ca2\ua4d1\U00010295",
    "p": "\u03c1\u0440\u2374\u2ca3",
    "Q": "\u2d55",
    "q": "\u051b\u0563\u0566",
    "QE": "\U0001f700",
    "R": "\u01a6\u13a1\u13d2\u1587\ua4e3\U000104b4\U00016f35\U0001d216",
    "r": "\u0433\u1d26\u2c85\uab47\uab48\uab81",
    "rn": "\u006d\U00011700\U000118e3",
    "S": "\u0405\u054f\u13d5\u13da\ua4e2\U00010296\U00010420\U00016f3a",
    "s": "\u01bd\u0455\ua731\uabaa\U00010448\U000118c1",
    "sss": "\U0001f75c",
    "T": ("\u03a4\u0422\u13a2\u22a4\u27d9\u2ca6\ua4d4\U00010297\U000102b1\U00010315\U000118bc\U00016f0a"
             "\U0001f768"),
    "T3": "\ua728",
    "tf": "\ua777",
    "ts": "\u02a6",
    "U": "\u054d\u1200\u144c\u222a\u22c3\ua4f4\U000104ce\U000118b8\U00016f42",
    "u": "\u028b\u03c5\u057d\u1d1c\ua79f\uab4e\uab52\U000104f6\U000118d8",
    "ue": "\u1d6b",
    "uo": "\uab63",
    "V": "\u0474\u0667\u06f7\u13d9\u142f\u2d38\ua4e6\ua6df\U0001051d\U000118a0\U00016f08\U0001d20d",
    "v": "\u03bd\u0475\u05d8\u1d20\u2228\u22c1\uaba9\U00011706\U000118c0",
    "VB": "\U0001f76c",
    "W": "\u051c\u13b3\u13d4\ua4ea\U000118e6\U000118ef",
    "w": "\u026f\u0461\u051d\u0561\u1d21\uab83\U0001170a\U0001170e\U0001170f",
    "X": ("\u03a7\u0425\u166d\u16b7\u2573\u2cac\u2d5d\ua4eb\ua7b3\U00010290\U000102b4\U00010317\U00010322"
             "\U00010527\U000118ec"),
    "x": "\u00d7\u0445\u1541\u157d\u166e\u292b\u292c\u2a2f",
    "Y": "\u03a5\u0423\u04ae\u13a9\u13bd\u2ca8\ua4ec\U000102b2\U000118a4\U00016f43",
    "y": "\u0263\u028f\u03b3\u0443\u04af\u10e7\u1d8c\u1eff\uab5a\U000118dc",
    "Z": "\u0396\u13c3\ua4dc\U000102f5\U000118a9\U000118e5",
    "z": "\u1d22\uab93\U000118c4",
}
PROTOTYPE = {ch: proto for proto, chars in CONFUSABLES.items() for ch in chars}


def invisible(ch: str) -> str | None:
    """Why ``ch`` draws nothing (None when it draws something)."""
    cp = ord(ch)
    if any(lo <= cp <= hi for lo, hi in DEFAULT_IGNORABLE):
        return "an invisible character"
    return "a blank character" if cp in BLANK else None


def clean(value) -> str:
    """A seat's name as the board keeps it; ``ValueError`` naming what is wrong."""
    if not isinstance(value, str) or len(value) > 4 * MAX:
        raise ValueError(f"seat: expected 1..{MAX} printable characters")
    name = " ".join(unicodedata.normalize("NFKC", value).split())
    for ch in name:
        why = invisible(ch)
        if why:
            what = " ".join(filter(None, (f"U+{ord(ch):04X}", unicodedata.name(ch, ""))))
            raise ValueError(f"seat: {why} ({what}) would make the name read like another; "
                             f"type it with visible characters only")
    if not 1 <= len(name) <= MAX or not name.isprintable():
        raise ValueError(f"seat: expected 1..{MAX} printable characters")
    scripts = {unicodedata.name(ch, "?").split(" ")[0] for ch in name if unicodedata.category(ch).startswith("L")}
    mixed = sorted(scripts & LOOKALIKE_SCRIPTS)
    if len(mixed) > 1:
        raise ValueError(f"seat: {' and '.join(s.lower() for s in mixed)} letters in one name (a look-alike); "
                         f"write it in one script")
    return name


def skeleton(text: str) -> str:
    """TR39's skeleton: NFD, each character replaced by its prototype, NFD again."""
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFD", "".join(PROTOTYPE.get(ch, ch) for ch in decomposed))


def look_alike(a: str, b: str) -> bool:
    """Two names a person may take for one another (they share a form of ``looks``)."""
    return bool(looks(a) & looks(b))


def looks(name: str) -> frozenset[str]:
    """The forms a reader may take ``name`` for: its skeleton case-folded, and the skeleton of its case-folded
    form. Two names look the same when they share one."""
    return frozenset({skeleton(skeleton(name).casefold()), skeleton(name.casefold())})

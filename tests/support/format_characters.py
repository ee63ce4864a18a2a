"""The format characters the cards' tests put in a call, one table for the CLI's and the workbench's."""

# Format characters (Unicode category Cf), each shown on a card as its escape: drawn as they are, they reorder or hide
# what follows them, so the call a person approves could read as another.
FORMAT_CHARACTERS = {
    "U+202E right-to-left override": "\u202e",
    "U+202A left-to-right embedding": "\u202a",
    "U+2066 left-to-right isolate": "\u2066",
    "U+2067 right-to-left isolate": "\u2067",
    "U+2068 first strong isolate": "\u2068",
    "U+2069 pop directional isolate": "\u2069",
    "U+200E left-to-right mark": "\u200e",
    "U+061C Arabic letter mark": "\u061c",
    "U+200B zero width space": "\u200b",
    "U+200D zero width joiner": "\u200d",
    "U+2060 word joiner": "\u2060",
    "U+FEFF zero width no-break space": "\ufeff",
    "U+00AD soft hyphen": "\u00ad",
    "U+E0001 language tag": "\U000e0001",
}
HIDDEN = "".join(FORMAT_CHARACTERS.values())

"""The `gpt` example's text and tokenizer, ported line for line from
`crates/gradtape-examples/examples/gpt/corpus.rs` for the peer scripts
(`gpt_torch.py`, `gpt_jax.py`, `gpt_tf.py`), so that `--vocab N` gives
them the same ids, the same vocabulary size and the same model:

- the text: `docs/*.md` sorted by name, then `README.md`, each followed by
  a newline;
- a word is a maximal run of ASCII letters, digits and `_`; its form is
  the run with the one space before it when a space precedes it, else the
  bare run;
- ids `0..C` are the distinct characters, sorted; ids `C..` the forms by
  count, most frequent first, ties in byte (code point) order, as many as
  `N - C` allows; ids past the last form are unused (no text encodes to
  them) when the text has fewer forms;
- encoding scans left to right: a space then a word whose spaced form is a
  token gives that token; a word whose bare form is a token gives it; any
  other word its characters; anything else the character.

    python3 scripts/gpt_tokens.py [N]   # the sizes, and a round trip checked

Without `N` (`vocab=None`) the ids are the characters', as without
`--vocab`."""
import glob
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load_text():
    paths = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]
    return "".join(open(p, encoding="utf-8").read() + "\n" for p in paths)


def is_word(c):
    return c.isascii() and (c.isalnum() or c == "_")


def word_end(s, i):
    while i < len(s) and is_word(s[i]):
        i += 1
    return i


class Tokenizer:
    def __init__(self, text, vocab=None):
        self.chars = sorted(set(text))
        self.size = len(self.chars) if vocab is None else vocab
        if self.size < len(self.chars):
            raise ValueError(f"--vocab {self.size}: the text has {len(self.chars)} distinct characters")
        self.char_index = {c: i for i, c in enumerate(self.chars)}
        counts = {}
        i = 0
        while i < len(text):
            if is_word(text[i]):
                j = word_end(text, i)
                spaced = i > 0 and text[i - 1] == " "
                form = text[i - spaced : j]
                counts[form] = counts.get(form, 0) + 1
                i = j
            else:
                i += 1
        forms = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        self.words = [f for f, _ in forms[: self.size - len(self.chars)]]
        self.index = {w: len(self.chars) + k for k, w in enumerate(self.words)}

    def unused(self):
        return self.size - len(self.chars) - len(self.words)

    def encode(self, s):
        ids = []
        i = 0
        while i < len(s):
            if self.index and s[i] == " " and i + 1 < len(s) and is_word(s[i + 1]):
                j = word_end(s, i + 1)
                if s[i:j] in self.index:
                    ids.append(self.index[s[i:j]])
                    i = j
                    continue
            if is_word(s[i]):
                j = word_end(s, i)
                if s[i:j] in self.index:
                    ids.append(self.index[s[i:j]])
                else:
                    ids.extend(self.char_index[c] for c in s[i:j])
                i = j
                continue
            ids.append(self.char_index[s[i]])
            i += 1
        return ids

    def decode(self, ids):
        c = len(self.chars)
        return "".join(
            self.chars[i] if i < c else self.words[i - c] if i - c < len(self.words) else "\ufffd" for i in ids
        )


def corpus(vocab=None):
    """The tokenizer and the training ids (the first 90 %)."""
    text = load_text()
    tok = Tokenizer(text, vocab)
    ids = tok.encode(text)
    return tok, ids[: len(ids) * 9 // 10]


if __name__ == "__main__":
    text = load_text()
    tok = Tokenizer(text, int(sys.argv[1]) if len(sys.argv) > 1 else None)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    print(f"{len(text)} characters -> {len(ids)} tokens; vocabulary {tok.size}: "
          f"{len(tok.chars)} characters, {len(tok.words)} words, {tok.unused()} unused")

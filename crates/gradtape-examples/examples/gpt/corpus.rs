//! The training text and its tokens: characters by default, or (`--vocab
//! N`) the characters plus the text's most frequent whole words, and the
//! batches and validation windows cut from the ids.
//!
//! The word vocabulary is built and applied in one pass each, with no
//! merges to learn, so that `scripts/gpt_torch.py` (and the JAX and
//! TensorFlow scripts) port it line for line:
//!
//! - A *word* is a maximal run of ASCII letters, digits and `_`; its *form*
//!   is the run with the one space before it when a space precedes it
//!   (`" tape"`, as GPT-2's tokens carry their space), else the bare run.
//! - Ids `0..C` are the text's `C` distinct characters, sorted (the
//!   character vocabulary, as without `--vocab`); ids `C..` the forms by
//!   count, most frequent first, ties in byte order of the form, as many
//!   as `N - C` allows.
//! - Encoding scans left to right: at a space followed by a word whose
//!   spaced form is a token, that token; at the start of a word whose bare
//!   form is a token, that token; at the start of any other word, its
//!   characters; anywhere else, the character. Decoding concatenates, so
//!   `decode(encode(s)) == s` for any text of the vocabulary's characters.
//! - When the text has fewer distinct forms than `N - C`, the ids above
//!   the last form are *unused*: the model still has `N` rows, logits and
//!   optimizer slots (the cost measured is that of an `N`-token
//!   vocabulary), no text encodes to them, and they decode as `U+FFFD`.

use std::collections::HashMap;
use std::path::PathBuf;

use gradtape::{Result, Rng, Tensor};

use super::{invalid, ROOT};

/// A character of a word: ASCII letters, digits and `_`.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The end of the word that starts at `i` (the index past its last character).
fn word_end(chars: &[char], i: usize) -> usize {
    let mut j = i;
    while j < chars.len() && is_word(chars[j]) {
        j += 1;
    }
    j
}

/// The text as token ids, split 90/10 into training and validation.
pub struct Corpus {
    /// The text's distinct characters, sorted: ids `0..chars.len()`.
    pub chars: Vec<char>,
    /// The word tokens (forms, a leading space included where it has
    /// one), most frequent first: ids from `chars.len()`.
    pub words: Vec<String>,
    /// The vocabulary's size: characters, words and unused ids.
    pub size: usize,
    index: HashMap<String, i64>,
    pub train: Vec<i64>,
    pub valid: Vec<i64>,
}

impl Corpus {
    /// `docs/*.md` (by name) then `README.md`, from the workspace root
    /// (the held-out tail is the README's last section: prose and code,
    /// like the rest, where the docs end in a table), tokenized with
    /// `vocab` tokens (`None`: the characters).
    pub fn load(vocab: Option<usize>) -> Result<Corpus> {
        Corpus::with_vocab(&Corpus::text()?, vocab)
    }

    /// The training text: each file followed by a newline.
    pub fn text() -> Result<String> {
        let root = PathBuf::from(ROOT);
        let read = |p: &PathBuf| std::fs::read_to_string(p).map_err(|e| invalid(format!("{}: {e}", p.display())));
        let docs = root.join("docs");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&docs)
            .map_err(|e| invalid(format!("{}: {e}", docs.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        files.sort();
        files.push(root.join("README.md"));
        let mut text = String::new();
        for f in &files {
            text.push_str(&read(f)?);
            text.push('\n');
        }
        Ok(text)
    }

    /// The character vocabulary of `text` and its 90/10 split.
    pub fn new(text: &str) -> Corpus {
        Corpus::with_vocab(text, None).expect("a character vocabulary always fits")
    }

    /// `text` tokenized with `vocab` tokens (`None`: its characters only),
    /// split 90/10. An error when `vocab` is below the text's characters.
    pub fn with_vocab(text: &str, vocab: Option<usize>) -> Result<Corpus> {
        let all: Vec<char> = text.chars().collect();
        let mut chars = all.clone();
        chars.sort_unstable();
        chars.dedup();
        let size = vocab.unwrap_or(chars.len());
        if size < chars.len() {
            return Err(invalid(format!(
                "--vocab {size}: the text has {} distinct characters, each a token, so the vocabulary needs at least {}",
                chars.len(),
                chars.len()
            )));
        }
        // every word's form, counted
        let mut counts: HashMap<String, usize> = HashMap::new();
        let mut i = 0;
        while i < all.len() {
            if is_word(all[i]) {
                let j = word_end(&all, i);
                let spaced = i > 0 && all[i - 1] == ' ';
                let form: String = all[i - spaced as usize..j].iter().collect();
                *counts.entry(form).or_default() += 1;
                i = j;
            } else {
                i += 1;
            }
        }
        let mut forms: Vec<(String, usize)> = counts.into_iter().collect();
        forms.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let words: Vec<String> = forms.into_iter().take(size - chars.len()).map(|f| f.0).collect();
        let index = words
            .iter()
            .enumerate()
            .map(|(k, w)| (w.clone(), (chars.len() + k) as i64))
            .collect();
        let mut corpus = Corpus {
            chars,
            words,
            size,
            index,
            train: Vec::new(),
            valid: Vec::new(),
        };
        let ids = corpus.encode(text)?;
        let n_train = ids.len() * 9 / 10;
        corpus.valid = ids[n_train..].to_vec();
        corpus.train = ids[..n_train].to_vec();
        Ok(corpus)
    }

    /// The vocabulary's size (unused ids included).
    pub fn vocab(&self) -> usize {
        self.size
    }

    /// The ids that no text encodes to (0 without `--vocab` or when the
    /// text has enough words).
    pub fn unused(&self) -> usize {
        self.size - self.chars.len() - self.words.len()
    }

    fn char_id(&self, c: char) -> Result<i64> {
        self.chars
            .binary_search(&c)
            .map(|i| i as i64)
            .map_err(|_| invalid(format!("{c:?} is not in the vocabulary")))
    }

    /// The ids of `s`; a character not in the vocabulary is an error.
    pub fn encode(&self, s: &str) -> Result<Vec<i64>> {
        let all: Vec<char> = s.chars().collect();
        let mut ids = Vec::with_capacity(all.len());
        let mut i = 0;
        while i < all.len() {
            if !self.index.is_empty() && all[i] == ' ' && i + 1 < all.len() && is_word(all[i + 1]) {
                let j = word_end(&all, i + 1);
                if let Some(&id) = self.index.get(&all[i..j].iter().collect::<String>()) {
                    ids.push(id);
                    i = j;
                    continue;
                }
            }
            if is_word(all[i]) {
                // (a word starts here: the scan never stops inside one)
                let j = word_end(&all, i);
                if let Some(&id) = self.index.get(&all[i..j].iter().collect::<String>()) {
                    ids.push(id);
                } else {
                    for &c in &all[i..j] {
                        ids.push(self.char_id(c)?);
                    }
                }
                i = j;
                continue;
            }
            ids.push(self.char_id(all[i])?);
            i += 1;
        }
        Ok(ids)
    }

    /// The text of `ids`: their characters and words concatenated (an
    /// unused id gives `U+FFFD`).
    pub fn decode(&self, ids: &[i64]) -> String {
        let mut s = String::new();
        for &i in ids {
            let i = i as usize;
            match (self.chars.get(i), self.words.get(i.wrapping_sub(self.chars.len()))) {
                (Some(&c), _) => s.push(c),
                (None, Some(w)) => s.push_str(w),
                _ => s.push('\u{FFFD}'),
            }
        }
        s
    }
}

/// `batch` windows of `context + 1` tokens from random offsets of
/// `data`: the inputs (the first `context`) and the targets (the last
/// `context`), `[batch, context]` each.
pub fn random_batch(data: &[i64], batch: usize, context: usize, rng: &mut Rng) -> Result<(Tensor, Tensor)> {
    if data.len() <= context + 1 {
        return Err(invalid(format!(
            "{} tokens: too few for windows of {}",
            data.len(),
            context + 1
        )));
    }
    let (mut x, mut y) = (Vec::with_capacity(batch * context), Vec::with_capacity(batch * context));
    for _ in 0..batch {
        let at = rng.below((data.len() - context) as u64) as usize;
        x.extend_from_slice(&data[at..at + context]);
        y.extend_from_slice(&data[at + 1..at + context + 1]);
    }
    Ok((
        Tensor::from_vec(x, &[batch, context])?,
        Tensor::from_vec(y, &[batch, context])?,
    ))
}

/// The validation windows: `data` cut into consecutive windows of
/// `context + 1` tokens (overlapping by one), inputs and targets.
pub fn windows(data: &[i64], context: usize) -> Result<(Tensor, Tensor)> {
    let n = (data.len().saturating_sub(1)) / context;
    if n == 0 {
        return Err(invalid(format!(
            "{} tokens: too few for a window of {}",
            data.len(),
            context + 1
        )));
    }
    let x: Vec<i64> = (0..n)
        .flat_map(|i| data[i * context..(i + 1) * context].to_vec())
        .collect();
    let y: Vec<i64> = (0..n)
        .flat_map(|i| data[i * context + 1..(i + 1) * context + 1].to_vec())
        .collect();
    Ok((Tensor::from_vec(x, &[n, context])?, Tensor::from_vec(y, &[n, context])?))
}

//! Files attached to a person's message: which become ACP `image` content, which are saved where the
//! agent can read them, and which are refused — and why, in words the person sees (nothing a person
//! sends vanishes). Pure: the runner downloads and saves what [`plan`] accepts, and tells the agent
//! about each saved file with [`file_block`]: an ACP `resource_link` (every agent takes those), or
//! the text itself as an embedded `resource` when the agent takes embedded context.

use std::path::{Component, Path, PathBuf};

use crate::channel::Attachment;

/// The per-prompt budget for files (`[attachments]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The agent takes `image` content (`promptCapabilities.image`).
    pub agent_images: bool,
    /// Images per prompt.
    pub max_images: usize,
    /// Bytes of one image.
    pub max_image_bytes: u64,
    /// Bytes of all images of one prompt (they travel inline, base64).
    pub max_images_total: u64,
    /// Other files per prompt.
    pub max_files: usize,
    /// Bytes of one other file.
    pub max_file_bytes: u64,
    /// The agent takes embedded `resource` content (`promptCapabilities.embeddedContext`).
    pub agent_embedded: bool,
    /// Bytes of saved text files of one prompt embedded in it; past them a file goes as a
    /// `resource_link` only.
    pub max_embedded_bytes: u64,
    /// Time all downloads of one message may take together; what is not downloaded by then is
    /// left out with a notice that says it took too long.
    pub download_time: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            agent_images: false,
            max_images: 4,
            max_image_bytes: 5 << 20,
            max_images_total: 10 << 20,
            max_files: 10,
            max_file_bytes: 10 << 20,
            agent_embedded: false,
            max_embedded_bytes: 128 << 10,
            download_time: std::time::Duration::from_secs(30),
        }
    }
}

/// What becomes of one attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Use {
    /// Sent to the agent as `image` content of this MIME type.
    Image(String),
    /// Saved under the session's directory; its path goes into the prompt text.
    Save,
    /// Not used; the reason is shown to the person.
    Refuse(String),
}

/// Image types the agent may be given (what ACP agents and model APIs take).
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Extensions of text files saved even when the platform names no useful MIME type.
const TEXT_EXTENSIONS: &[&str] = &[
    "txt", "log", "md", "json", "yaml", "yml", "toml", "csv", "tsv", "xml", "html", "ini", "cfg",
    "conf", "sh", "py", "rs", "go", "js", "ts", "java", "c", "h", "cpp", "rb", "sql", "diff",
    "patch", "out", "err",
];

/// Other file types saved for the agent.
const FILE_TYPES: &[&str] = &[
    "application/json",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/pdf",
    "application/x-sh",
    "application/javascript",
    "application/sql",
];

fn extension(name: &str) -> Option<String> {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
}

fn image_type(a: &Attachment) -> Option<String> {
    let mime = a.mime.as_deref().map(str::to_ascii_lowercase);
    if let Some(m) = mime.as_deref().filter(|m| IMAGE_TYPES.contains(m)) {
        return Some(m.to_owned());
    }
    if mime
        .as_deref()
        .is_some_and(|m| !m.is_empty() && m != "application/octet-stream")
    {
        return None;
    }
    match extension(&a.name).as_deref() {
        Some("png") => Some("image/png".into()),
        Some("jpg" | "jpeg") => Some("image/jpeg".into()),
        Some("gif") => Some("image/gif".into()),
        Some("webp") => Some("image/webp".into()),
        _ => None,
    }
}

fn saved_type(a: &Attachment) -> bool {
    let mime = a.mime.as_deref().map(str::to_ascii_lowercase);
    mime.as_deref()
        .is_some_and(|m| m.starts_with("text/") || FILE_TYPES.contains(&m))
        || extension(&a.name).is_some_and(|e| TEXT_EXTENSIONS.contains(&e.as_str()))
}

/// The image type its bytes say (PNG, JPEG, GIF, WebP signatures): what the agent is told, whatever
/// the platform announced; `None` when the bytes are no image of an accepted type.
#[must_use]
pub fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Whether `bytes` cannot be text a model reads as it is: a NUL byte, or not UTF-8.
#[must_use]
pub fn looks_binary(bytes: &[u8]) -> bool {
    bytes.contains(&0) || std::str::from_utf8(bytes).is_err()
}

/// What a binary file's bytes say it is when that is a kind refused whatever its declared type
/// (executables, archives): a file announced as `text/plain` is checked by its content.
#[must_use]
pub fn sniff_refused(bytes: &[u8]) -> Option<&'static str> {
    if !looks_binary(bytes) {
        return None;
    }
    const EXECUTABLES: &[&[u8]] = &[
        b"\x7fELF",
        b"MZ",
        &[0xfe, 0xed, 0xfa, 0xce],
        &[0xfe, 0xed, 0xfa, 0xcf],
        &[0xce, 0xfa, 0xed, 0xfe],
        &[0xcf, 0xfa, 0xed, 0xfe],
        &[0xca, 0xfe, 0xba, 0xbe],
        b"\0asm",
    ];
    const ARCHIVES: &[&[u8]] = &[
        b"PK\x03\x04",
        &[0x1f, 0x8b],
        b"7z\xbc\xaf\x27\x1c",
        b"Rar!\x1a\x07",
        b"\xfd7zXZ\0",
        b"BZh",
    ];
    if EXECUTABLES.iter().any(|m| bytes.starts_with(m)) {
        Some("its content is an executable program, not text (executables are not accepted)")
    } else if ARCHIVES.iter().any(|m| bytes.starts_with(m)) {
        Some("its content is an archive, not text (archives are not accepted)")
    } else {
        None
    }
}

/// The MIME type a saved file is announced with: the platform's (without parameters) when it says
/// something useful, else one read from the extension; `None` when neither says.
#[must_use]
pub fn mime_of(a: &Attachment) -> Option<String> {
    let announced = a
        .mime
        .as_deref()
        .and_then(|m| m.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty() && m != "application/octet-stream");
    if announced.is_some() {
        return announced;
    }
    let by_extension = match extension(&a.name)?.as_str() {
        "md" => "text/markdown",
        "csv" => "text/csv",
        "html" => "text/html",
        "json" => "application/json",
        "xml" => "application/xml",
        "yaml" | "yml" => "application/yaml",
        "toml" => "application/toml",
        "pdf" => "application/pdf",
        e if TEXT_EXTENSIONS.contains(&e) => "text/plain",
        _ => return None,
    };
    Some(by_extension.to_owned())
}

/// Whether a file of this type (from [`mime_of`]) is text a model can read as it is (not a PDF).
fn is_text_type(mime: Option<&str>) -> bool {
    mime.is_some_and(|m| {
        m.starts_with("text/") || (FILE_TYPES.contains(&m) && m != "application/pdf")
    })
}

/// `file://` and the absolute path, each byte that may not stand in a URI path percent-encoded
/// (RFC 3986: unreserved characters, sub-delimiters, `:`, `@` and `/` stay as they are).
#[must_use]
pub fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut uri = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// How the agent is told about a file saved at `path`: its text as an embedded `resource` when the
/// agent takes embedded context, the file is UTF-8 text and it fits in what is left of the prompt's
/// budget (`embed_left`, reduced by what it takes); otherwise a `resource_link` to it. Never both:
/// an agent that reads linked files (qwen does) would see the text twice.
#[must_use]
pub fn file_block(
    path: &Path,
    a: &Attachment,
    bytes: &[u8],
    limits: &Limits,
    embed_left: &mut u64,
) -> daemon_client::PromptBlock {
    let uri = file_uri(path);
    let mut mime = mime_of(a);
    let size = bytes.len() as u64;
    // A file announced as text is taken as text only when its bytes are.
    if is_text_type(mime.as_deref()) && looks_binary(bytes) {
        mime = Some("application/octet-stream".into());
    }
    if limits.agent_embedded
        && size <= *embed_left
        && is_text_type(mime.as_deref())
        && let Ok(text) = std::str::from_utf8(bytes)
    {
        *embed_left -= size;
        return daemon_client::PromptBlock::Resource {
            uri,
            mime_type: mime,
            text: text.to_owned(),
        };
    }
    daemon_client::PromptBlock::ResourceLink {
        uri,
        name: shown_name(&a.name),
        mime_type: mime,
        size: Some(size),
    }
}

/// The prompt text with the saved files' paths after what the person typed.
#[must_use]
pub fn prompt_text(typed: &str, saved: &[PathBuf]) -> String {
    if saved.is_empty() {
        return typed.to_owned();
    }
    let mut text = typed.trim_end().to_owned();
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str("Files attached to this message, saved for you to read:");
    for p in saved {
        text.push_str(&format!("\n- {}", p.display()));
    }
    text
}

/// A byte count for people, one form everywhere: `5 MB`, `1.5 MB`, `812 kB`, `4.9 kB`, `120 bytes`
/// (one decimal when it is not a whole number).
#[must_use]
pub fn human_bytes(n: u64) -> String {
    let (value, unit) = if n >= 1 << 20 {
        (n as f64 / f64::from(1 << 20), "MB")
    } else if n >= 1 << 10 {
        (n as f64 / f64::from(1 << 10), "kB")
    } else {
        return format!("{n} bytes");
    };
    let shown = format!("{value:.1}");
    format!("{} {unit}", shown.strip_suffix(".0").unwrap_or(&shown))
}

/// Why a file is too large: its size and the limit, or `more than <limit>` when the two read alike
/// (5 MB and 10 bytes is not "5 MB; at most 5 MB").
#[must_use]
pub fn too_large(size: u64, what: &str, max: u64) -> String {
    let (size, max) = (human_bytes(size), human_bytes(max));
    if size == max {
        format!("too large (more than {max})")
    } else {
        format!("too large ({size}; {what} may be at most {max})")
    }
}

/// Decides each attachment's use, in order, within `limits`. A size the platform did not announce is
/// checked again when the file is downloaded.
#[must_use]
pub fn plan(files: &[Attachment], limits: &Limits) -> Vec<Use> {
    let (mut images, mut image_bytes, mut saved) = (0usize, 0u64, 0usize);
    files
        .iter()
        .map(|a| {
            let size = a.size.unwrap_or(0);
            if let Some(mime) = image_type(a) {
                if !limits.agent_images {
                    return Use::Refuse("the agent does not take images".into());
                }
                if size > limits.max_image_bytes {
                    return Use::Refuse(too_large(size, "an image", limits.max_image_bytes));
                }
                if images >= limits.max_images {
                    return Use::Refuse(format!(
                        "too many images (at most {} per message)",
                        limits.max_images
                    ));
                }
                if image_bytes + size > limits.max_images_total {
                    return Use::Refuse(format!(
                        "the images of one message may add up to at most {}",
                        human_bytes(limits.max_images_total)
                    ));
                }
                images += 1;
                image_bytes += size;
                return Use::Image(mime);
            }
            if !saved_type(a) {
                return Use::Refuse(format!(
                    "type {} not accepted (images, text, logs, JSON/YAML/TOML, PDF are)",
                    a.mime.as_deref().unwrap_or("unknown")
                ));
            }
            if size > limits.max_file_bytes {
                return Use::Refuse(too_large(size, "a file", limits.max_file_bytes));
            }
            if saved >= limits.max_files {
                return Use::Refuse(format!(
                    "too many files (at most {} per message)",
                    limits.max_files
                ));
            }
            saved += 1;
            Use::Save
        })
        .collect()
}

/// A file name safe to create in a directory of ours: no path separators or `..`, no control or
/// hidden-file dot at the start, at most 100 characters (the extension kept); `file` when nothing is
/// left.
#[must_use]
pub fn sanitize_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ' ' | '+' | '@' | '(' | ')') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim().trim_start_matches('.').to_owned();
    let cleaned = if cleaned.chars().count() > 100 {
        let ext = extension(&cleaned).filter(|e| e.len() <= 10);
        let stem: String = cleaned.chars().take(90).collect();
        match ext {
            Some(e) => format!("{}.{e}", stem.trim_end_matches('.')),
            None => stem,
        }
    } else {
        cleaned
    };
    if cleaned.is_empty() || cleaned.chars().all(|c| c == '.' || c == '_') {
        "file".into()
    } else {
        cleaned
    }
}

/// Where a saved file goes: `<cwd>/.chat-bridge/attachments/<turn>/<n>-<name>` (the index keeps two
/// files of the same name apart; spaces become `_`, so the file's `file://` URI needs no escape for
/// them — some agents, qwen among them, take the URI's path as it is written). Always inside `cwd`.
#[must_use]
pub fn saved_path(cwd: &Path, turn: &str, index: usize, name: &str) -> PathBuf {
    let turn = sanitize_name(turn).replace(' ', "_");
    let path = cwd
        .join(".chat-bridge")
        .join("attachments")
        .join(turn)
        .join(format!(
            "{}-{}",
            index + 1,
            sanitize_name(name).replace(' ', "_")
        ));
    debug_assert!(
        path.strip_prefix(cwd)
            .is_ok_and(|p| p.components().all(|c| matches!(c, Component::Normal(_))))
    );
    path
}

/// Writes a saved file at `path` (from [`saved_path`]) without following a symbolic link anywhere
/// inside `cwd`: each of `.chat-bridge`, `attachments` and the turn's folder must be a real directory
/// (a missing one is created with `create_dir`, never through a link), and the file itself is created
/// with `O_CREAT|O_EXCL`, which refuses a link in its place. The agent can write in `cwd`; a link it
/// planted there must not send a person's file somewhere else. A link is refused with
/// [`std::io::ErrorKind::InvalidInput`] and a message saying so.
///
/// # Errors
/// When a folder on the way is a link or not a directory, or the file cannot be created or written.
pub fn save_file(cwd: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let link = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a folder or file on its path is a symbolic link",
        )
    };
    let rel = path
        .strip_prefix(cwd)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "outside the folder"))?;
    let parts: Vec<_> = rel.components().collect();
    let Some((_, dirs)) = parts.split_last() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no file name",
        ));
    };
    let mut dir = cwd.to_path_buf();
    for c in dirs {
        let Component::Normal(c) = c else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a plain path",
            ));
        };
        dir.push(c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => return Err(link()),
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a folder on its path is a file",
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::create_dir(&dir) {
                Ok(()) => {}
                // Created meanwhile: looked at again, a link is still refused.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if !std::fs::symlink_metadata(&dir)?.is_dir() {
                        return Err(link());
                    }
                }
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
    // A turn written again (after a restart) replaces its own file, never a link in its place.
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Err(link()),
        Ok(m) if m.is_file() => std::fs::remove_file(path)?,
        Ok(_) => return Err(link()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// A file name as a person is shown it: no control characters (ESC, BEL, new lines), no bidi
/// overrides or other invisible format characters, at most 100 characters; `file` when nothing is left.
#[must_use]
pub fn shown_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|c| {
            !c.is_control()
                && !matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
        })
        .collect();
    let cleaned = crate::channel::text::truncate_chars(cleaned.trim(), 100);
    if cleaned.is_empty() {
        "file".into()
    } else {
        cleaned
    }
}

/// The notice for refused files, or `None` when every file was used. `ran` says whether the text of
/// the message went to the agent anyway. Each name is cleaned ([`shown_name`]) and each name and
/// reason redacted on its own, so a name like `token=…` never takes the reason with it; the text is
/// ready to post as it is.
#[must_use]
pub fn refusal_notice(
    r: &crate::core::redact::Redactor,
    refused: &[(&str, &str)],
    ran: bool,
) -> Option<String> {
    if refused.is_empty() {
        return None;
    }
    let mut text = String::from("📎 Not passed to the agent:");
    for (name, why) in refused {
        text.push_str(&format!(
            "\n• {}: {}",
            r.redact(&shown_name(name)),
            r.redact(why)
        ));
    }
    text.push_str(if ran {
        "\nThe rest of your message was sent."
    } else {
        "\nThere was nothing else in your message to send."
    });
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, mime: Option<&str>, size: u64) -> Attachment {
        Attachment {
            id: format!("F-{name}"),
            name: name.into(),
            mime: mime.map(str::to_owned),
            size: Some(size),
            url: None,
        }
    }

    fn images() -> Limits {
        Limits {
            agent_images: true,
            ..Limits::default()
        }
    }

    #[test]
    fn images_go_inline_within_the_budget_and_each_refusal_says_why() {
        let l = Limits {
            max_images: 2,
            max_image_bytes: 1000,
            max_images_total: 1500,
            ..images()
        };
        let files = [
            file("a.png", Some("image/png"), 800),
            file("big.jpg", Some("image/jpeg"), 5000),
            file("b.webp", None, 800),
            file("c.gif", Some("image/gif"), 100),
            file("d.png", Some("image/png"), 100),
        ];
        let out = plan(&files, &l);
        assert_eq!(out[0], Use::Image("image/png".into()));
        assert!(
            matches!(&out[1], Use::Refuse(w) if w.starts_with("too large (4.9 kB")),
            "{:?}",
            out[1]
        );
        assert!(
            matches!(&out[2], Use::Refuse(w) if w.contains("add up to at most 1.5 kB")),
            "{:?}",
            out[2]
        );
        assert_eq!(out[3], Use::Image("image/gif".into()));
        assert!(
            matches!(&out[4], Use::Refuse(w) if w.contains("too many images (at most 2")),
            "{:?}",
            out[4]
        );
    }

    #[test]
    fn an_agent_without_images_refuses_them_and_files_are_saved_or_refused_by_type() {
        let files = [
            file("shot.png", Some("image/png"), 10),
            file("build.log", Some("application/octet-stream"), 10),
            file("notes.txt", Some("text/plain"), 10),
            file("setup.exe", Some("application/x-msdownload"), 10),
            file("huge.json", Some("application/json"), 11 << 20),
        ];
        let out = plan(&files, &Limits::default());
        assert_eq!(out[0], Use::Refuse("the agent does not take images".into()));
        assert_eq!(out[1], Use::Save);
        assert_eq!(out[2], Use::Save);
        assert!(
            matches!(&out[3], Use::Refuse(w) if w.contains("application/x-msdownload not accepted"))
        );
        assert!(
            matches!(&out[4], Use::Refuse(w) if w.contains("too large (11 MB")),
            "{:?}",
            out[4]
        );
    }

    #[test]
    fn saved_names_never_leave_the_attachments_directory() {
        let cwd = Path::new("/work/project");
        for hostile in [
            "../../etc/passwd",
            "/abs/path.txt",
            "..",
            ".",
            "",
            "a\u{0}b\nc.txt",
            "C:\\windows\\x.log",
            ".bashrc",
            "\u{202e}gpj.exe",
        ] {
            let p = saved_path(cwd, "turn-1", 0, hostile);
            let rel = p
                .strip_prefix(cwd.join(".chat-bridge/attachments/turn-1"))
                .expect("inside");
            assert_eq!(rel.components().count(), 1, "{hostile:?} → {p:?}");
            let name = rel.to_str().unwrap_or_default();
            assert!(
                !name.contains(['/', '\\', '\0', '\n', '\u{202e}']),
                "{name:?}"
            );
        }
        assert_eq!(sanitize_name("report (1).txt"), "report (1).txt");
        let long = format!("{}.log", "x".repeat(300));
        let cut = sanitize_name(&long);
        assert!(cut.chars().count() <= 100 && cut.ends_with(".log"), "{cut}");
        assert_eq!(
            saved_path(cwd, "t", 1, "a.txt"),
            cwd.join(".chat-bridge/attachments/t/2-a.txt")
        );
        assert_eq!(
            saved_path(cwd, "t", 0, "Screen log (1).txt"),
            cwd.join(".chat-bridge/attachments/t/1-Screen_log_(1).txt")
        );
    }

    #[test]
    fn a_symlinked_attachments_folder_is_never_written_through() {
        let root = tempfile::tempdir().expect("tempdir");
        let cwd = root.path().join("project");
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir_all(&cwd).expect("cwd");
        std::fs::create_dir_all(&elsewhere).expect("elsewhere");
        let path = saved_path(&cwd, "t", 0, "a.txt");
        // A plain save works, and saving the same turn again replaces its own file.
        save_file(&cwd, &path, b"one").expect("saved");
        save_file(&cwd, &path, b"two").expect("saved again");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let refused = |what: &str| {
            let p = saved_path(&cwd, "t2", 0, "a.txt");
            let e = save_file(&cwd, &p, b"secret").expect_err(what);
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{what}: {e}");
            assert!(e.to_string().contains("symbolic link"), "{what}: {e}");
            assert_eq!(
                std::fs::read_dir(&elsewhere).expect("ls").count(),
                0,
                "{what}: written through the link"
            );
        };
        // The turn's folder, `attachments`, `.chat-bridge` and the file itself, each a link in turn.
        let turn = cwd.join(".chat-bridge/attachments/t2");
        std::os::unix::fs::symlink(&elsewhere, &turn).expect("link");
        refused("turn folder");
        std::fs::remove_file(&turn).expect("unlink");
        std::fs::create_dir(&turn).expect("turn");
        std::os::unix::fs::symlink(elsewhere.join("x"), turn.join("1-a.txt")).expect("link");
        refused("the file");
        std::fs::remove_dir_all(cwd.join(".chat-bridge/attachments")).expect("rm");
        std::os::unix::fs::symlink(&elsewhere, cwd.join(".chat-bridge/attachments")).expect("link");
        refused("attachments");
        std::fs::remove_dir_all(cwd.join(".chat-bridge")).expect("rm");
        std::os::unix::fs::symlink(&elsewhere, cwd.join(".chat-bridge")).expect("link");
        refused(".chat-bridge");
    }

    #[test]
    fn the_refusal_notice_names_each_file_and_whether_the_text_ran() {
        let r = crate::core::redact::Redactor::new(&[]).expect("redactor");
        assert_eq!(refusal_notice(&r, &[], true), None);
        let n = refusal_notice(&r, &[("a.png", "the agent does not take images")], true)
            .unwrap_or_default();
        assert!(
            n.contains("a.png: the agent does not take images") && n.contains("was sent"),
            "{n}"
        );
        let n = refusal_notice(&r, &[("a.exe", "type x not accepted")], false).unwrap_or_default();
        assert!(n.contains("nothing else"), "{n}");
        assert_eq!(human_bytes(5 << 20), "5 MB");
        assert_eq!(sniff_image(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(sniff_image(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff_image(b"<svg onload=x>"), None);
        assert_eq!(
            prompt_text(
                "look",
                &[PathBuf::from("/w/.chat-bridge/attachments/t/1-a.log")]
            ),
            "look\n\nFiles attached to this message, saved for you to read:\n- /w/.chat-bridge/attachments/t/1-a.log"
        );
        assert_eq!(human_bytes(1536 * 1024), "1.5 MB");
    }

    #[test]
    fn a_saved_file_reaches_the_agent_as_a_link_or_within_the_budget_as_embedded_text() {
        use daemon_client::PromptBlock;
        let path = Path::new("/w/.chat-bridge/attachments/t/1-build log.txt");
        let log = file("build log.txt", Some("text/plain; charset=utf-8"), 6);
        // No embedded context: a link, with the name, type and size.
        let mut left = 1000;
        assert_eq!(
            file_block(path, &log, b"error\n", &Limits::default(), &mut left),
            PromptBlock::ResourceLink {
                uri: "file:///w/.chat-bridge/attachments/t/1-build%20log.txt".into(),
                name: "build log.txt".into(),
                mime_type: Some("text/plain".into()),
                size: Some(6),
            }
        );
        assert_eq!(left, 1000, "nothing embedded, nothing spent");
        let embedding = Limits {
            agent_embedded: true,
            ..Limits::default()
        };
        // Embedded context: the text itself, and the budget shrinks by it.
        let mut left = 10;
        assert_eq!(
            file_block(path, &log, b"error\n", &embedding, &mut left),
            PromptBlock::Resource {
                uri: "file:///w/.chat-bridge/attachments/t/1-build%20log.txt".into(),
                mime_type: Some("text/plain".into()),
                text: "error\n".into(),
            }
        );
        assert_eq!(left, 4);
        // Past the budget, not UTF-8, or not text (a PDF): a link.
        for (a, bytes) in [
            (&log, &b"more than four"[..]),
            (&file("b.log", None, 3), &b"\xff\xfe\x00"[..]),
            (&file("r.pdf", Some("application/pdf"), 3), &b"%PD"[..]),
        ] {
            let mut left = 4;
            assert!(
                matches!(
                    file_block(path, a, bytes, &embedding, &mut left),
                    PromptBlock::ResourceLink { .. }
                ),
                "{}",
                a.name
            );
            assert_eq!(left, 4);
        }
        // A log the platform calls octet-stream is text by its extension.
        let mut left = 100;
        assert!(matches!(
            file_block(path, &file("x.log", Some("application/octet-stream"), 2), b"ok", &embedding, &mut left),
            PromptBlock::Resource { mime_type: Some(m), .. } if m == "text/plain"
        ));
        assert_eq!(
            file_uri(Path::new("/w/é (1)#?.txt")),
            "file:///w/%C3%A9%20(1)%23%3F.txt"
        );
    }

    #[test]
    fn a_file_declared_text_is_taken_as_text_only_when_its_bytes_are() {
        let limits = Limits {
            agent_embedded: true,
            ..Limits::default()
        };
        let path = Path::new("/w/.chat-bridge/attachments/t/1-notes.txt");
        let a = file("notes.txt", Some("text/plain"), 0);
        let block = |bytes: &[u8]| file_block(path, &a, bytes, &limits, &mut 1_000_000);
        // Real text is embedded.
        assert!(matches!(
            block(b"hello\n"),
            daemon_client::PromptBlock::Resource { .. }
        ));
        // NULs or bytes that are not UTF-8: linked as a binary file, never embedded.
        for lying in [&b"abc\0\0\0def"[..], &[0xff, 0xfe, 0x41, 0x00][..]] {
            match block(lying) {
                daemon_client::PromptBlock::ResourceLink { mime_type, .. } => {
                    assert_eq!(mime_type.as_deref(), Some("application/octet-stream"));
                }
                other => panic!("{lying:?} → {other:?}"),
            }
        }
        // Executables and archives are refused by their bytes whatever they were announced as.
        let elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0>\0";
        assert!(sniff_refused(elf).is_some_and(|w| w.contains("executable")));
        assert!(sniff_refused(b"PK\x03\x04\x14\0\0\0").is_some_and(|w| w.contains("archive")));
        assert_eq!(
            sniff_refused(b"MZ is how this text file starts\n"),
            None,
            "text stays text"
        );
        assert_eq!(
            sniff_refused(b"abc\0def"),
            None,
            "binary but no refused kind: saved"
        );
    }

    #[test]
    fn sizes_read_one_way_with_a_decimal_when_needed() {
        assert_eq!(human_bytes(10 << 20), "10 MB");
        assert_eq!(human_bytes(812 << 10), "812 kB");
        assert_eq!(human_bytes(5000), "4.9 kB");
        assert_eq!(human_bytes(120), "120 bytes");
        assert_eq!(
            too_large((5 << 20) + 10, "an image", 5 << 20),
            "too large (more than 5 MB)"
        );
        assert_eq!(
            too_large(6 << 20, "an image", 5 << 20),
            "too large (6 MB; an image may be at most 5 MB)"
        );
        let l = Limits {
            agent_images: true,
            ..Limits::default()
        };
        let out = plan(&[file("a.png", Some("image/png"), (5 << 20) + 10)], &l);
        assert_eq!(out[0], Use::Refuse("too large (more than 5 MB)".into()));
        assert_eq!(
            crate::channel::FetchError::TooLarge(10 << 20).to_string(),
            "too large (more than 10 MB)"
        );
    }

    #[test]
    fn s2_the_refusal_notice_cleans_and_redacts_each_name_alone_and_keeps_the_reason() {
        let r = crate::core::redact::Redactor::new(&[]).expect("redactor");
        let why = "type application/zip not accepted";
        let cases: &[(&str, &str)] = &[
            (
                "../../etc/passwd",
                "• ../../etc/passwd: type application/zip not accepted",
            ),
            (
                "token=abc123.zip",
                "• token=[redacted]: type application/zip not accepted",
            ),
            (
                "a\u{1b}[31mred\u{7}\u{202e}gpj.exe\nb",
                "• a[31mredgpj.exeb: type application/zip not accepted",
            ),
            (
                "\u{202e}\u{1b}",
                "• file: type application/zip not accepted",
            ),
        ];
        for (name, want) in cases {
            let n = refusal_notice(&r, &[(name, why)], true).unwrap_or_default();
            let line = n.lines().nth(1).unwrap_or_default();
            assert_eq!(line, *want, "{name:?}");
        }
    }
}

//! Every form a secret can take in what runner writes (docs/src/security.md, "Secrets"): as it
//! is; escaped inside a JSON string (serde's way, ASCII-only, HTML-safe as Go writes it, `\/`,
//! and a JSON string inside a JSON string); escaped as XML and HTML text (the entity sets of
//! quick-xml, minijinja and the numeric ones); URL- and form-encoded; base64 at each alignment.
//! A secret of several lines (a PEM key) is also hidden line by line, as a diff or a drift line
//! prints it; a JSON credentials blob also by the values of its secret-named fields (its
//! `private_key`), as a tool that decodes it prints them.
//!
//! Knowing the forms lets every sink redact the bytes it writes, whatever serialised them, so
//! no sink has to redact values one by one before encoding them.

use super::MIN_REDACTED_LEN;

/// How deep a JSON blob's fields are looked into.
const MAX_JSON_DEPTH: usize = 8;

/// Every form of `value` worth hiding (each at least [`MIN_REDACTED_LEN`] bytes), with
/// duplicates.
pub fn of(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    whole(value, &mut out, 0);
    out.retain(|form| form.len() >= MIN_REDACTED_LEN);
    out.sort();
    out.dedup();
    out
}

fn whole(value: &str, out: &mut Vec<String>, depth: usize) {
    text_forms(value, out);
    out.push(url_encoded(value));
    if value.contains(' ') {
        out.push(url_encoded(value).replace("%20", "+"));
    }
    out.extend(base64_forms(value.as_bytes()));
    // A multi-line secret printed a line at a time (a diff's `+` lines, a drift window, a
    // Markdown cell that turns newlines into spaces).
    if value.contains('\n') {
        for line in value.lines() {
            let line = line.trim();
            if line.len() >= MIN_REDACTED_LEN {
                text_forms(line, out);
            }
        }
    }
    if depth < MAX_JSON_DEPTH
        && value.trim_start().starts_with(['{', '['])
        && let Ok(json) = serde_json::from_str::<serde_json::Value>(value)
    {
        json_secrets(&json, false, out, depth + 1);
    }
}

/// The string values of `json` under a secret-named key (`private_key`, `client_secret`,
/// `password`, `token`), and their forms.
fn json_secrets(json: &serde_json::Value, secret: bool, out: &mut Vec<String>, depth: usize) {
    match json {
        serde_json::Value::String(text) if secret && text.trim().len() >= MIN_REDACTED_LEN => {
            whole(text.trim(), out, depth);
        }
        serde_json::Value::Array(items) => {
            for item in items {
                json_secrets(item, secret, out, depth);
            }
        }
        serde_json::Value::Object(fields) => {
            for (key, value) in fields {
                let named = super::is_secret_name(key)
                    || matches!(key.to_ascii_uppercase().as_str(), "KEY" | "CREDENTIAL");
                json_secrets(value, secret || named, out, depth);
            }
        }
        _ => {}
    }
}

/// The forms of a text as text: raw, escaped for JSON, escaped for XML and HTML.
fn text_forms(text: &str, out: &mut Vec<String>) {
    out.push(text.to_owned());
    let json = json_escaped(text);
    for form in [
        ascii_json(&json, false),
        ascii_json(&json, true),
        json.replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026"),
        json.replace('/', "\\/"),
        json_escaped(&json),
    ] {
        out.push(form);
    }
    for escaped in [text, json.as_str()] {
        out.extend(xml_forms(escaped));
    }
    out.push(json);
}

/// `text` as serde_json writes it inside a string (without the quotes).
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::Value::String(text.to_owned()).to_string();
    quoted
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .map_or(quoted.clone(), str::to_owned)
}

/// JSON text with every non-ASCII character as `\uXXXX` (surrogate pairs above U+FFFF), in
/// lower- or upper-case hex, as Python's `json.dumps` and Java's writers do.
fn ascii_json(json: &str, upper: bool) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            if upper {
                out.push_str(&format!("\\u{unit:04X}"));
            } else {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// `text` as XML and HTML escapers write it: only `&<>`; with quotes as `&quot;`/`&apos;`
/// (quick-xml, JUnit); as minijinja's HTML (`&#x27;`, `&#x2f;`); with numeric quotes.
fn xml_forms(text: &str) -> Vec<String> {
    if !text.contains(['&', '<', '>', '"', '\'', '/']) {
        return Vec::new();
    }
    let base = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    vec![
        base.clone(),
        base.replace('"', "&quot;").replace('\'', "&apos;"),
        base.replace('"', "&quot;")
            .replace('\'', "&#x27;")
            .replace('/', "&#x2f;"),
        base.replace('"', "&#34;").replace('\'', "&#39;"),
    ]
}

/// As URLs encode it: everything but RFC 3986's unreserved characters.
fn url_encoded(text: &str) -> String {
    const URL: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(text, URL).to_string()
}

/// The part of `bytes`' base64 that is the same wherever they stand in a longer text, for each
/// of the three alignments (standard and URL-safe alphabets): the characters made only of
/// `bytes`' own bits (a Basic `Authorization` header a proxy echoes).
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    use base64::Engine as _;
    let mut forms = Vec::new();
    for offset in 0..3usize {
        let mut padded = vec![0u8; offset];
        padded.extend_from_slice(bytes);
        let total_bits = padded.len() * 8;
        // Characters whose 6 bits all come from `bytes`: after the offset's bits, before the end.
        let start = (offset * 8).div_ceil(6);
        let end = total_bits / 6;
        for engine in [
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ] {
            let encoded = engine.encode(&padded);
            if let Some(stable) = encoded.get(start..end.min(encoded.len())) {
                forms.push(stable.to_owned());
            }
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_and_a_backslash_have_their_escaped_forms() {
        let forms = of(r#"pa"ss\word-1234"#);
        for form in [
            r#"pa"ss\word-1234"#,
            r#"pa\"ss\\word-1234"#,
            r#"pa\\\"ss\\\\word-1234"#,
            "pa&quot;ss\\word-1234",
            "pa&#34;ss\\word-1234",
            "pa%22ss%5Cword-1234",
        ] {
            assert!(forms.iter().any(|f| f == form), "{form} not in {forms:#?}");
        }
    }

    #[test]
    fn a_pem_key_is_hidden_whole_escaped_and_line_by_line() {
        let pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----";
        let forms = of(pem);
        assert!(forms.iter().any(|f| f == pem));
        assert!(forms.iter().any(|f| f.contains("-----\\nMIIEvQ")));
        for line in ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "BKcwggSjAgEAAoIBAQC7"] {
            assert!(forms.iter().any(|f| f == line), "{line}");
        }
    }

    #[test]
    fn a_credentials_blob_hides_its_secret_fields() {
        let blob = r#"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END PRIVATE KEY-----\n", "client_email": "a@b.iam"}"#;
        let forms = of(blob);
        // The decoded key (a tool that prints it with `jq -r`), and its lines.
        assert!(
            forms
                .iter()
                .any(|f| f.starts_with("-----BEGIN PRIVATE KEY-----\nMIIE"))
        );
        assert!(forms.iter().any(|f| f == "MIIEvQIBADANBgkqhkiG9w0B"));
        // A field that is no secret is left alone.
        assert!(!forms.iter().any(|f| f == "service_account"));
    }

    #[test]
    fn non_ascii_has_its_ascii_json_form() {
        let forms = of("pässwörd-secret");
        assert!(forms.iter().any(|f| f == "p\\u00e4ssw\\u00f6rd-secret"));
        assert!(forms.iter().any(|f| f == "p\\u00E4ssw\\u00F6rd-secret"));
    }
}

//! `steps/<id>/transcript.jsonl`: one JSON object a line, appended and flushed as the step goes,
//! so a crash or an interrupt keeps everything up to that moment.

use std::fs::{File, OpenOptions};
use std::io::Write;

use camino::{Utf8Path, Utf8PathBuf};
use serde_json::Value;

#[derive(Debug)]
pub struct Transcript {
    path: Utf8PathBuf,
    file: Option<File>,
    /// The first write error, reported once in the run's output instead of failing the step.
    pub error: Option<String>,
}

impl Transcript {
    pub fn create(path: &Utf8Path) -> Self {
        let file = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| OpenOptions::new().create(true).append(true).open(path));
        match file {
            Ok(file) => Self {
                path: path.to_owned(),
                file: Some(file),
                error: None,
            },
            Err(err) => Self {
                path: path.to_owned(),
                file: None,
                error: Some(format!("cannot write `{path}`: {err}")),
            },
        }
    }

    /// A transcript that records nothing (for callers that keep none).
    pub fn disabled() -> Self {
        Self {
            path: Utf8PathBuf::new(),
            file: None,
            error: None,
        }
    }

    pub fn write(&mut self, mut event: Value) {
        let Some(file) = &mut self.file else { return };
        if let Value::Object(map) = &mut event {
            map.insert(
                "at".into(),
                Value::String(jiff::Timestamp::now().to_string()),
            );
        }
        let mut line = crate::secrets::redact_owned(event.to_string());
        line.push('\n');
        if let Err(err) = file.write_all(line.as_bytes()).and_then(|()| file.flush()) {
            self.error = Some(format!("cannot write `{}`: {err}", self.path));
            self.file = None;
        }
    }
}

//! Index over the crate's embedded `FileDescriptorSet`, by fully qualified name.

#![allow(dead_code)]

use std::collections::HashMap;

use prost::Message;
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
    FileDescriptorSet,
};

/// The decoded descriptor set with messages and enums indexed by full name (no leading dot).
pub struct Descriptors {
    files: Vec<FileDescriptorProto>,
    messages: HashMap<String, DescriptorProto>,
    enums: HashMap<String, EnumDescriptorProto>,
}

impl Descriptors {
    pub fn load() -> Self {
        let set = FileDescriptorSet::decode(leasehold_proto::FILE_DESCRIPTOR_SET)
            .expect("FILE_DESCRIPTOR_SET decodes");
        let mut index = Self {
            files: Vec::new(),
            messages: HashMap::new(),
            enums: HashMap::new(),
        };
        for file in &set.file {
            for e in &file.enum_type {
                index.add_enum(file.package(), e);
            }
            for m in &file.message_type {
                index.add_message(file.package(), m);
            }
        }
        index.files = set.file;
        index
    }

    fn add_enum(&mut self, scope: &str, e: &EnumDescriptorProto) {
        self.enums
            .insert(format!("{scope}.{}", e.name()), e.clone());
    }

    fn add_message(&mut self, scope: &str, m: &DescriptorProto) {
        let name = format!("{scope}.{}", m.name());
        for e in &m.enum_type {
            self.add_enum(&name, e);
        }
        for nested in &m.nested_type {
            self.add_message(&name, nested);
        }
        self.messages.insert(name, m.clone());
    }

    pub fn file(&self, name: &str) -> &FileDescriptorProto {
        self.files
            .iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("no file {name}"))
    }

    pub fn files(&self) -> &[FileDescriptorProto] {
        &self.files
    }

    pub fn message(&self, name: &str) -> &DescriptorProto {
        self.messages
            .get(name)
            .unwrap_or_else(|| panic!("no message {name}"))
    }

    pub fn enumeration(&self, name: &str) -> &EnumDescriptorProto {
        self.enums
            .get(name)
            .unwrap_or_else(|| panic!("no enum {name}"))
    }

    pub fn field(&self, message: &str, field: &str) -> &FieldDescriptorProto {
        self.message(message)
            .field
            .iter()
            .find(|f| f.name() == field)
            .unwrap_or_else(|| panic!("no field {message}.{field}"))
    }
}

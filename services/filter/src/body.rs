//! The `body` scope's lookup: finds the leaves of a JSON body at every rule's path in one
//! walk of the body. Arrays are transparent (any element, at any depth of array nesting),
//! and a `.` in a path may be a level of nesting or part of a key, as in SNS (`a.b` finds both
//! `{"a":{"b":…}}` and `{"a.b":…}`).
//!
//! The rules' paths (their keys joined with `.`) are kept in a radix trie built from the
//! policy's keys, each key inserted once below its parent, so the trie holds each byte of the
//! policy's keys at most once. A body object is walked key by key from the trie position of
//! the path consumed so far; a body node has exactly one consumed path (its keys joined with
//! `.`), so it is visited at most once whatever the dots in the policy's keys, and a key is
//! compared byte by byte against the trie at most once: the walk costs at most the body's size,
//! plus, for each scalar found at a rule's path, that path's rules' conditions.

use serde_json::{Map, Value};

use crate::parse::Compiled;

/// What the walk found at one rule's path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// A scalar was found at the path.
    pub(crate) present: bool,
    /// One of those scalars satisfied one of the rule's conditions.
    pub(crate) matched: bool,
}

/// A radix trie over the rules' paths; node 0 is the root (the empty path).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct PathTrie {
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct TrieNode {
    /// Edges by distinct first byte; labels are never empty.
    edges: Vec<TrieEdge>,
    /// The rules whose path ends here.
    rules: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
struct TrieEdge {
    label: Box<[u8]>,
    to: u32,
}

/// A place in the trie: at a node (`edge` = `None`) or `offset` bytes into one of its edges.
#[derive(Debug, Clone, Copy)]
struct Pos {
    node: u32,
    edge: Option<u32>,
    offset: usize,
}

impl Pos {
    fn at(node: u32) -> Self {
        Self {
            node,
            edge: None,
            offset: 0,
        }
    }
}

impl PathTrie {
    /// The trie of `compiled`'s rule paths.
    pub(crate) fn new(compiled: &Compiled) -> Self {
        let mut trie = Self {
            nodes: vec![TrieNode::default()],
        };
        // Keys come before their children, so a parent's node is known when a child needs it.
        let mut key_nodes: Vec<u32> = Vec::with_capacity(compiled.keys.len());
        for key in &compiled.keys {
            let node = match key.parent.and_then(|p| key_nodes.get(p as usize)) {
                Some(&parent) => trie.insert(parent, &[b".", key.name.as_bytes()]),
                None => trie.insert(0, &[key.name.as_bytes()]),
            };
            key_nodes.push(node);
        }
        for (index, rule) in compiled.rules.iter().enumerate() {
            if let Some(node) = key_nodes
                .get(rule.key as usize)
                .and_then(|&n| trie.nodes.get_mut(n as usize))
            {
                node.rules.push(index as u32);
            }
        }
        // Kept for as long as the subscription: no room left over from growing.
        trie.nodes.shrink_to_fit();
        for node in &mut trie.nodes {
            node.edges.shrink_to_fit();
            node.rules.shrink_to_fit();
        }
        trie
    }

    /// The node at `from` followed by the bytes of `parts`, made if missing.
    fn insert(&mut self, from: u32, parts: &[&[u8]]) -> u32 {
        let bytes: Vec<u8> = parts.concat();
        let mut rest: &[u8] = &bytes;
        let mut node = from;
        while let Some(&first) = rest.first() {
            let Some(current) = self.nodes.get(node as usize) else {
                return node;
            };
            let found = current
                .edges
                .iter()
                .position(|edge| edge.label.first() == Some(&first));
            let Some(index) = found else {
                let to = self.nodes.len() as u32;
                self.nodes.push(TrieNode::default());
                if let Some(current) = self.nodes.get_mut(node as usize) {
                    current.edges.push(TrieEdge {
                        label: rest.into(),
                        to,
                    });
                }
                return to;
            };
            let (label, to) = match current.edges.get(index) {
                Some(edge) => (edge.label.clone(), edge.to),
                None => return node,
            };
            let common = label
                .iter()
                .zip(rest)
                .take_while(|(left, right)| left == right)
                .count();
            if common < label.len() {
                // Split the edge where the new path leaves it.
                let middle = self.nodes.len() as u32;
                self.nodes.push(TrieNode {
                    edges: vec![TrieEdge {
                        label: label.get(common..).unwrap_or_default().into(),
                        to,
                    }],
                    rules: Vec::new(),
                });
                if let Some(edge) = self
                    .nodes
                    .get_mut(node as usize)
                    .and_then(|n| n.edges.get_mut(index))
                {
                    edge.label = label.get(..common).unwrap_or_default().into();
                    edge.to = middle;
                }
                node = middle;
            } else {
                node = to;
            }
            rest = rest.get(common..).unwrap_or_default();
        }
        node
    }

    /// Where `bytes` lead from `pos`, if any path goes on that way.
    fn advance(&self, mut pos: Pos, mut bytes: &[u8]) -> Option<Pos> {
        loop {
            let node = self.nodes.get(pos.node as usize)?;
            let index = match pos.edge {
                Some(index) => index,
                None => {
                    let Some(&first) = bytes.first() else {
                        return Some(pos);
                    };
                    node.edges
                        .iter()
                        .position(|edge| edge.label.first() == Some(&first))?
                        as u32
                }
            };
            let edge = node.edges.get(index as usize)?;
            let label = edge.label.get(pos.offset..)?;
            let shared = label.len().min(bytes.len());
            if label.get(..shared)? != bytes.get(..shared)? {
                return None;
            }
            bytes = bytes.get(shared..)?;
            if shared == label.len() {
                pos = Pos::at(edge.to);
            } else {
                // The bytes ran out inside the label.
                return Some(Pos {
                    node: pos.node,
                    edge: Some(index),
                    offset: pos.offset + shared,
                });
            }
        }
    }

    /// Walks `object` (a body) and reports, per rule, what was found at its path.
    /// `on_leaf` judges one scalar for one rule.
    pub(crate) fn walk(
        &self,
        object: &Map<String, Value>,
        seen: &mut [Seen],
        on_leaf: &dyn Fn(u32, &Value) -> bool,
    ) {
        if self.nodes.len() > 1 || self.nodes.first().is_some_and(|r| !r.rules.is_empty()) {
            self.walk_object(object, Pos::at(0), seen, on_leaf);
        }
    }

    fn walk_object(
        &self,
        object: &Map<String, Value>,
        from: Pos,
        seen: &mut [Seen],
        on_leaf: &dyn Fn(u32, &Value) -> bool,
    ) {
        for (key, value) in object {
            if let Some(pos) = self.advance(from, key.as_bytes()) {
                self.walk_value(value, pos, seen, on_leaf);
            }
        }
    }

    fn walk_value(
        &self,
        value: &Value,
        pos: Pos,
        seen: &mut [Seen],
        on_leaf: &dyn Fn(u32, &Value) -> bool,
    ) {
        match value {
            Value::Array(items) => {
                for item in items {
                    self.walk_value(item, pos, seen, on_leaf);
                }
            }
            Value::Object(inner) => {
                if let Some(next) = self.advance(pos, b".") {
                    self.walk_object(inner, next, seen, on_leaf);
                }
            }
            scalar => {
                if pos.edge.is_some() {
                    return;
                }
                let Some(node) = self.nodes.get(pos.node as usize) else {
                    return;
                };
                for &rule in &node.rules {
                    if let Some(entry) = seen.get_mut(rule as usize) {
                        entry.present = true;
                        if !entry.matched && on_leaf(rule, scalar) {
                            entry.matched = true;
                        }
                    }
                }
            }
        }
    }

    /// Bytes this trie holds on the heap.
    pub(crate) fn heap_size(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<TrieNode>()
            + self
                .nodes
                .iter()
                .map(|node| {
                    node.edges.capacity() * std::mem::size_of::<TrieEdge>()
                        + node.edges.iter().map(|e| e.label.len()).sum::<usize>()
                        + node.rules.capacity() * std::mem::size_of::<u32>()
                })
                .sum::<usize>()
    }
}

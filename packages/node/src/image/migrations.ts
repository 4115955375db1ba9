// State DB tables of the image cache. The lead wires `imageMigrations` into the server's migration list.
//
// image_manifests: one row per pulled image (platform manifest), with the parts of its config aenv uses and its
//                  layer list; last_used_at drives LRU eviction.
// image_refs:      reference ("docker.io/library/ubuntu:24.04", "oci:/dir:tag") → manifest digest, as last pulled.
// image_layers:    unpacked layers present on disk, per id-map variant (the ownership shift is part of the layer's
//                  on-disk identity).
// image_leases:    holders ("sandbox:<id>", "template:<id>", "pull:<uuid>") that pin an image against eviction.

import type { Migration } from '../state/db.js';

export const imageMigrations: readonly Migration[] = [
  {
    id: 'image-0001-cache',
    up(db) {
      db.exec(`
        CREATE TABLE image_manifests (
          manifest_digest TEXT PRIMARY KEY,
          config_digest   TEXT NOT NULL,
          config_json     TEXT NOT NULL,
          raw_config      TEXT NOT NULL,
          layers_json     TEXT NOT NULL,
          platform        TEXT NOT NULL,
          created_at      INTEGER NOT NULL,
          last_used_at    INTEGER NOT NULL
        );
        CREATE TABLE image_refs (
          reference       TEXT PRIMARY KEY,
          manifest_digest TEXT NOT NULL REFERENCES image_manifests(manifest_digest) ON DELETE CASCADE,
          source_stamp    TEXT,
          updated_at      INTEGER NOT NULL
        );
        CREATE INDEX image_refs_by_manifest ON image_refs(manifest_digest);
        CREATE TABLE image_layers (
          id_map      TEXT NOT NULL,
          diff_id     TEXT NOT NULL,
          disk_bytes  INTEGER NOT NULL,
          created_at  INTEGER NOT NULL,
          PRIMARY KEY (id_map, diff_id)
        );
        CREATE TABLE image_leases (
          holder          TEXT PRIMARY KEY,
          manifest_digest TEXT NOT NULL,
          acquired_at     INTEGER NOT NULL
        );
        CREATE INDEX image_leases_by_manifest ON image_leases(manifest_digest);
      `);
    },
  },
];

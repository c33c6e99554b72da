// The walk (walk.mjs) with the TypeScript SDK 2.x, @modelcontextprotocol/client, pinned
// in package.json. COUNTERSIGN_ERA picks the era: "legacy" (the SDK's default, the
// initialize handshake) or "2026-07-28" (pinned: per-request protocol version).
import { readFileSync } from 'node:fs';

import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/client/validators/ajv';

import { main } from './walk.mjs';

const pkg = new URL('./node_modules/@modelcontextprotocol/client/package.json', import.meta.url);
const era = process.env.COUNTERSIGN_ERA ?? 'legacy';
const mode = era === 'legacy' ? 'legacy' : { pin: era };

await main({
    version: JSON.parse(readFileSync(pkg, 'utf8')).version,
    Client,
    Transport: StreamableHTTPClientTransport,
    Validator: AjvJsonSchemaValidator,
    ClientCredentialsProvider,
    clientOptions: validator => ({
        capabilities: {},
        versionNegotiation: { mode },
        ...(validator ? { jsonSchemaValidator: validator } : {})
    }),
    protocolVersion: client => client.getNegotiatedProtocolVersion() ?? null
});

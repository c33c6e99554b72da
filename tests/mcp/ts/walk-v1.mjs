// The walk (walk.mjs) with the TypeScript SDK 1.x, @modelcontextprotocol/sdk, pinned in
// package.json: what most desktop clients and IDEs are built on. It speaks the initialize
// handshake (2025-11-25) only.
import { readFileSync } from 'node:fs';

import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';

import { main } from './walk.mjs';

const pkg = new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);

await main({
    version: JSON.parse(readFileSync(pkg, 'utf8')).version,
    Client,
    Transport: StreamableHTTPClientTransport,
    Validator: AjvJsonSchemaValidator,
    ClientCredentialsProvider,
    clientOptions: validator => ({ capabilities: {}, ...(validator ? { jsonSchemaValidator: validator } : {}) }),
    protocolVersion: (client, transport) => transport.protocolVersion ?? null
});

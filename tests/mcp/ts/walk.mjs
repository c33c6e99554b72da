// The walk both SDK versions take against Countersign's /mcp, as a desktop client or an
// IDE would: connect with the agent token, list the tools (each with its outputSchema),
// make a call that is refused, propose a plan, read it back, withdraw it, read the
// resources, and connect once more through an OAuth `authProvider` holding a refused
// token. The SDK validates every structured result against the tool's outputSchema
// itself; the validator it is given counts those checks, so the report shows that they
// ran and passed. The report is one JSON document on standard output; the test
// (tests/mcp/test_typescript_clients.py) asserts on it.
//
// Environment: COUNTERSIGN_URL (the web server's base URL), COUNTERSIGN_TOKEN (an agent
// token allowed update_contact_email), COUNTERSIGN_ERA ("legacy", the initialize
// handshake, or "2026-07-28"; the 1.x SDK knows only the handshake), COUNTERSIGN_WALK
// ("tasks": the 2025-11-25 task-augmented calls instead, with the 1.x SDK's experimental
// tasks API; the test approves the plan proposed with the reason "the walk: a task").

const BAD_TOKEN = 'cs_refused_token_for_the_walk';

/** A fetch that records what it asked and what came back (no headers, no bodies). */
export function recordingFetch(log) {
    return async (input, init) => {
        const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
        const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
        const response = await fetch(input, init);
        log.push({
            method,
            path: url.pathname,
            status: response.status,
            contentType: (response.headers.get('content-type') ?? '').split(';')[0]
        });
        return response;
    };
}

/** Wraps the SDK's own JSON Schema validator (Ajv) and counts what it checks. */
export class CountingValidator {
    constructor(inner) {
        this.inner = inner;
        this.checks = [];
    }

    getValidator(schema) {
        const validate = this.inner.getValidator(schema);
        return input => {
            const result = validate(input);
            this.checks.push({ valid: result.valid, error: result.errorMessage ?? null });
            return result;
        };
    }
}

function errorReport(error) {
    return {
        name: error?.constructor?.name ?? typeof error,
        code: error?.code ?? null,
        message: String(error?.message ?? error)
    };
}

function callReport(result) {
    return {
        isError: Boolean(result.isError),
        text: result.content?.find(c => c.type === 'text')?.text ?? null,
        structuredContent: result.structuredContent ?? null,
        contentTypes: (result.content ?? []).map(c => c.type)
    };
}

/** Call a tool; a thrown error is part of the report, not the end of the walk. */
async function call(client, validator, name, args) {
    const before = validator.checks.length;
    try {
        const result = await client.callTool({ name, arguments: args });
        return { ...callReport(result), threw: null, checks: validator.checks.slice(before) };
    } catch (error) {
        return { threw: errorReport(error), checks: validator.checks.slice(before) };
    }
}

/**
 * @param sdk {Client, Transport, Validator, ClientCredentialsProvider, clientOptions(validator),
 *             protocolVersion(client, transport), version}
 */
export async function walk(sdk) {
    const base = process.env.COUNTERSIGN_URL;
    const token = process.env.COUNTERSIGN_TOKEN;
    const mcpUrl = new URL('/mcp', base);
    const report = { sdk: sdk.version, era: process.env.COUNTERSIGN_ERA ?? 'legacy', steps: {} };
    const steps = report.steps;

    // --- the agent, with its token as a header ---
    const validator = new CountingValidator(new sdk.Validator());
    const requests = [];
    const transport = new sdk.Transport(mcpUrl, {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
        fetch: recordingFetch(requests)
    });
    const client = new sdk.Client({ name: 'countersign-walk', version: '1.0.0' }, sdk.clientOptions(validator));
    await client.connect(transport);
    report.protocolVersion = sdk.protocolVersion(client, transport);
    report.serverCapabilities = client.getServerCapabilities() ?? null;

    const tools = (await client.listTools()).tools;
    steps.tools = tools.map(t => ({
        name: t.name,
        outputSchemaType: t.outputSchema?.type ?? null,
        outputSchemaBranches: (t.outputSchema?.anyOf ?? []).map(b => b.$ref ?? null),
        execution: t.execution ?? null
    }));

    if (process.env.COUNTERSIGN_WALK === 'tasks') {
        await taskSteps(client, validator, steps);
        await client.close();
        return report;
    }

    // Refused: the email is not an email (the API's 422, its pointer at the argument).
    steps.refused = await call(client, validator, 'update_contact_email', {
        contact_id: 'c-1001',
        email: 'not-an-email',
        reason: 'the walk: a refusal'
    });
    // Refused: get_plan with an id that is no plan id (a 422 at /arguments/plan_id).
    steps.refusedGetPlan = await call(client, validator, 'get_plan', { plan_id: 'not-a-uuid' });

    steps.proposed = await call(client, validator, 'update_contact_email', {
        contact_id: 'c-1001',
        email: 'walk@example.org',
        reason: 'the walk: a proposal'
    });
    const planId = steps.proposed.structuredContent?.id;
    if (planId) {
        steps.getPlan = await call(client, validator, 'get_plan', { plan_id: planId });
        steps.resourcePlan = await readResource(client, `countersign://plans/${planId}`);
        steps.cancelled = await call(client, validator, 'cancel_plan', { plan_id: planId });
        steps.cancelledAgain = await call(client, validator, 'cancel_plan', { plan_id: planId });
    }
    const listed = await client.listResources();
    steps.resources = listed.resources.map(r => r.uri);
    steps.resourceTemplates = (await client.listResourceTemplates()).resourceTemplates.map(t => t.uriTemplate);
    steps.card = await readResource(client, 'countersign://actions/update_contact_email/card');
    steps.validatorChecks = validator.checks.length;
    steps.requests = requests;
    await client.close();

    // --- an OAuth client (authProvider) whose token is refused ---
    steps.authProvider = await refusedOAuth(sdk, mcpUrl, interactiveProvider(BAD_TOKEN));
    steps.clientCredentials = await refusedOAuth(
        sdk,
        mcpUrl,
        new sdk.ClientCredentialsProvider({ clientId: 'walk', clientSecret: 'walk-secret' })
    );
    return report;
}

async function taskSteps(client, validator, steps) {
    // The 2025-11-25 tasks form: a task for a refused call (none: the error says why),
    // for a plan the test's reviewer approves (it completes once the worker applied
    // it), and for one withdrawn with tasks/cancel.
    steps.taskRefused = await taskStream(client, validator, 'update_contact_email', {
        contact_id: 'c-1001',
        email: 'not-an-email'
    });
    steps.taskCompleted = await taskStream(client, validator, 'update_contact_email', {
        contact_id: 'c-1001',
        email: 'task@example.org',
        reason: 'the walk: a task'
    });
    steps.taskCancelled = await taskStream(
        client,
        validator,
        'update_invoice_memo',
        { invoice_id: 'inv-2001', memo: 'the walk: withdrawn' },
        { cancel: true }
    );
}

/** A task-augmented call through the SDK's experimental tasks API (1.x): every message
 *  of its stream, summarised; with ``cancel``, tasks/cancel once the task exists. */
async function taskStream(client, validator, name, args, { cancel = false } = {}) {
    const before = validator.checks.length;
    const messages = [];
    try {
        for await (const message of client.experimental.tasks.callToolStream({ name, arguments: args })) {
            if (message.type === 'result') {
                messages.push({ type: 'result', ...callReport(message.result), meta: message.result._meta ?? null });
            } else if (message.type === 'error') {
                messages.push({ type: 'error', ...errorReport(message.error) });
            } else {
                messages.push({ type: message.type, status: message.task.status, taskId: message.task.taskId, pollInterval: message.task.pollInterval ?? null, statusMessage: message.task.statusMessage ?? null });
                if (cancel && message.type === 'taskCreated') {
                    const cancelled = await client.experimental.tasks.cancelTask(message.task.taskId);
                    messages.push({ type: 'cancelTask', status: cancelled.status, taskId: cancelled.taskId });
                }
            }
        }
    } catch (error) {
        messages.push({ type: 'threw', ...errorReport(error) });
    }
    return { messages, checks: validator.checks.slice(before) };
}

async function readResource(client, uri) {
    try {
        const result = await client.readResource({ uri });
        return { mimeTypes: result.contents.map(c => c.mimeType), text: result.contents[0]?.text ?? null, threw: null };
    } catch (error) {
        return { threw: errorReport(error) };
    }
}

/** What a desktop client's provider looks like: a stored token, a redirect URL, a place to
 *  save what registration returns. It records where it was sent to authorize. */
function interactiveProvider(accessToken) {
    let clientInformation;
    return {
        redirected: [],
        get redirectUrl() {
            return 'http://127.0.0.1:1/callback';
        },
        get clientMetadata() {
            return {
                client_name: 'countersign-walk',
                redirect_uris: ['http://127.0.0.1:1/callback'],
                grant_types: ['authorization_code', 'refresh_token'],
                response_types: ['code'],
                token_endpoint_auth_method: 'none'
            };
        },
        clientInformation: () => clientInformation,
        saveClientInformation: info => {
            clientInformation = info;
        },
        tokens: () => ({ access_token: accessToken, token_type: 'Bearer' }),
        saveTokens: () => {},
        redirectToAuthorization(url) {
            this.redirected.push(String(url));
        },
        saveCodeVerifier: () => {},
        codeVerifier: () => 'verifier'
    };
}

async function refusedOAuth(sdk, mcpUrl, provider) {
    const requests = [];
    const transport = new sdk.Transport(mcpUrl, { authProvider: provider, fetch: recordingFetch(requests) });
    const client = new sdk.Client({ name: 'countersign-walk-oauth', version: '1.0.0' }, sdk.clientOptions(null));
    let threw = null;
    try {
        await client.connect(transport);
        await client.listTools();
    } catch (error) {
        threw = errorReport(error);
    }
    await client.close().catch(() => {});
    return { threw, requests, redirected: provider.redirected ?? [] };
}

export async function main(sdk) {
    try {
        const report = await walk(sdk);
        process.stdout.write(JSON.stringify(report) + '\n');
    } catch (error) {
        process.stdout.write(JSON.stringify({ sdk: sdk.version, fatal: errorReport(error), stack: error?.stack }) + '\n');
        process.exitCode = 1;
    }
}

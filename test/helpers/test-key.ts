/**
 * The static key (server.yaml gateway.apiKeys) of every test config: a gateway role refuses requests without a
 * key, and the request helpers send this one by default (a gateway without keys ignores it).
 */
export const TEST_API_KEY = 'llmgw-test-static-key';

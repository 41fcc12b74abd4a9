-- openrouter_provider_slugs: the one table from an upstream's display name (what
-- OpenRouter's response names in its top-level "provider" field, and the ledger
-- records as upstream) to the slug provider.order / only / ignore take. A
-- helper of provider_order_verdict.
--
-- Sources: OpenRouter's GET /api/v1/providers (name, slug) and
-- /api/v1/models/{model}/endpoints (provider_name, tag), as captured in public
-- code and docs; its docs' examples ("anthropic", "openai", "together",
-- "azure", "deepinfra", "google-vertex"). Note that Google Vertex's display name
-- is plain "Google". Matching is on lower(display name). A name not listed
-- here gets a derived slug (lower case, runs of other characters as '-'), and
-- the verdict's reason says so: check it on the model's OpenRouter page.
CREATE OR REPLACE VIEW openrouter_provider_slugs AS
SELECT * FROM (VALUES
    ('amazon bedrock', 'amazon-bedrock'),
    ('anthropic', 'anthropic'),
    ('atlascloud', 'atlas-cloud'),
    ('azure', 'azure'),
    ('cloudflare', 'cloudflare'),
    ('cohere', 'cohere'),
    ('deepinfra', 'deepinfra'),
    ('deepseek', 'deepseek'),
    ('fireworks', 'fireworks'),
    ('google', 'google-vertex'),
    ('google ai studio', 'google-ai-studio'),
    ('google vertex', 'google-vertex'),
    ('mistral', 'mistral'),
    ('nebius ai studio', 'nebius'),
    ('novita', 'novita'),
    ('novita ai', 'novita'),
    ('nvidia', 'nvidia'),
    ('openai', 'openai'),
    ('streamlake', 'streamlake'),
    ('together', 'together'),
    ('together ai', 'together'),
    ('z.ai', 'z-ai')
) AS t(display_name, slug);

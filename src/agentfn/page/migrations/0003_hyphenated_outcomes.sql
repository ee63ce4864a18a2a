-- A refusal's kind is its problem type's slug, and slugs are hyphenated (bad-url, not bad_url): the audit's
-- outcomes written before then are renamed so that one kind has one name in every row.
UPDATE audit SET outcome = replace(outcome, '_', '-') WHERE outcome LIKE '%\_%';

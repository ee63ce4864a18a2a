-- Hybrid recall: full-text beside the vector. The text is folded (lower case, no diacritics) and split
-- with the 'simple' configuration: Postgres has no Croatian stemmer, so terms match as prefixes.
-- unaccent() is only STABLE; this wrapper names its dictionary, which makes it safe to declare IMMUTABLE.
CREATE FUNCTION fold(text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN public.unaccent('public.unaccent'::regdictionary, lower($1));

ALTER TABLE entries ADD COLUMN terms tsvector GENERATED ALWAYS AS (to_tsvector('simple', fold(text))) STORED;

-- The text half of recall reads a subject's terms together, as entries_recall does its vectors: a
-- covering index of its own (beside the vectors, one tuple could outgrow a page for 1024 dimensions).
CREATE INDEX entries_text ON entries (subject, model) INCLUDE (id, kind, terms);

-- A word as one quoted tsquery lexeme (quotes and backslashes escaped), whatever characters it holds.
CREATE FUNCTION quote_lexeme(text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN '''' || replace(replace($1, '\', '\\'), '''', '''''') || '''';

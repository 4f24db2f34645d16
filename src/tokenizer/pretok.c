/*
 * pretok.c - pre-tokenizers: where byte-level BPE text is cut into pieces
 * that merges never cross.
 *
 * Each pre-tokenizer family is a list of steps (llama.cpp's regex_exprs);
 * every step cuts every piece the previous step produced. Two kinds of step
 * exist, because llama.cpp has two:
 *
 *  - Hand-written splitters (split_gpt2, split_llama3): llama.cpp replaces
 *    the four most common regexes by loops of its own (unicode.cpp,
 *    unicode_regex_split_custom_*), and those loops differ from the regexes
 *    they stand for in corner cases (a lone space before the end of a piece
 *    takes the punctuation branch, "\s+(?!\S)" looks only inside the piece,
 *    ...). We copy the loops' behaviour, not the regexes'.
 *
 *  - Regexes run by std::regex (ECMAScript, leftmost match, first
 *    alternative that succeeds, backtracking): every match is a piece and
 *    so is every gap between matches. A regex with \p{..} runs on
 *    "collapsed" text where each non-ASCII code point is one byte standing
 *    for its category (letters 0xD2, numbers 0xD1, ...; White_Space 0x0B);
 *    one without runs on the code points with non-ASCII White_Space
 *    replaced by 0x0B. std::regex's \s in the C locale is ASCII only. The
 *    step functions below are matchers for the fixed regexes, derived by
 *    working through the backtracking by hand; the comment on each gives
 *    the regex and the reasoning. Both views agree on the predicates used
 *    here, so one code point class table (unicode.h) serves both.
 *
 * Positions are code point indexes into the fragment; a step only looks
 * inside the piece it cuts (llama.cpp's regex_iterator and its loops are
 * bounded the same way). Every step is O(piece length).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer-impl.h"
#include "tokenizer/unicode.h"

/* A class value for "outside the piece": no category, not White_Space, and
 * distinct from every real class (llama.cpp's empty unicode_cpt_flags). */
#define NONE 0x10u

#define CAT(c)   ((c) & HR_UCAT_MASK)
#define IS_L(c)  ((c) != NONE && CAT(c) == HR_UCAT_LETTER)
#define IS_N(c)  ((c) != NONE && CAT(c) == HR_UCAT_NUMBER)
#define IS_M(c)  ((c) != NONE && CAT(c) == HR_UCAT_MARK)
#define IS_P(c)  ((c) != NONE && CAT(c) == HR_UCAT_PUNCT)
#define IS_WS(c) (((c) & HR_UCAT_WS) != 0)

struct seg_out {
    uint32_t *ends;
    size_t n;
    uint32_t last;
};

static inline void emit(struct seg_out *o, size_t end)
{
    if (end > o->last) {
        o->ends[o->n++] = (uint32_t)end;
        o->last = (uint32_t)end;
    }
}

/* ------------------------------------------------------------------------ */
/* llama.cpp's hand-written splitters                                       */
/* ------------------------------------------------------------------------ */

/*
 * GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 * as unicode_regex_split_custom_gpt2 runs it.
 */
static void split_gpt2(const struct hr_pretok *t, size_t ini, size_t end, struct seg_out *o)
{
    const uint32_t *cp = t->cps;
    const uint8_t *cl = t->cls;
#define F(p) ((p) < end ? cl[p] : NONE)
    size_t pos = ini;
    while (pos < end) {
        uint32_t c = cp[pos];
        unsigned f = cl[pos];
        if (c == '\'' && pos + 1 < end) {
            uint32_t c1 = cp[pos + 1];
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                pos += 2;
                emit(o, pos);
                continue;
            }
            if (pos + 2 < end) {
                uint32_t c2 = cp[pos + 2];
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
                    (c1 == 'l' && c2 == 'l')) {
                    pos += 3;
                    emit(o, pos);
                    continue;
                }
            }
        }
        unsigned f2 = c == ' ' ? F(pos + 1) : f;
        if (IS_L(f2)) {
            pos += c == ' ';
            while (IS_L(F(pos)))
                pos++;
            emit(o, pos);
            continue;
        }
        if (IS_N(f2)) {
            pos += c == ' ';
            while (IS_N(F(pos)))
                pos++;
            emit(o, pos);
            continue;
        }
        if (f2 != NONE && !IS_WS(f2) && !IS_L(f2) && !IS_N(f2)) {
            pos += c == ' ';
            for (unsigned g = F(pos); g != NONE && !IS_WS(g) && !IS_L(g) && !IS_N(g); g = F(pos))
                pos++;
            emit(o, pos);
            continue;
        }
        size_t nws = 0;
        while (IS_WS(F(pos + nws)))
            nws++;
        if (nws > 1 && pos + nws < end) { /* \s+(?!\S), looking inside the piece only */
            pos += nws - 1;
            emit(o, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            emit(o, pos);
            continue;
        }
        emit(o, ++pos); /* no branch matched (cannot happen inside a piece) */
    }
#undef F
}

enum llama3_variant { V_LLAMA3, V_QWEN2, V_QWEN35 };

static inline uint32_t ascii_lower(uint32_t c)
{
    /* llama.cpp lowercases with the full Unicode table, but only ASCII
     * capitals lowercase to the letters compared below. */
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/*
 * Llama 3:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen 2: the same with \p{N} for \p{N}{1,3}. Qwen 3.5: Qwen 2 with
 * [\p{L}\p{M}] for letters. As unicode_regex_split_custom_llama3/qwen2/
 * qwen35 run them (note the punctuation branch tests the first code
 * point's flags, not the one after the optional space).
 */
static void split_llama3(const struct hr_pretok *t, size_t ini, size_t end, struct seg_out *o,
                         enum llama3_variant v)
{
    const uint32_t *cp = t->cps;
    const uint8_t *cl = t->cls;
#define F(p)    ((p) < end ? cl[p] : NONE)
#define CP(p)   ((p) < end ? cp[p] : 0xFFFFFFFFu)
#define WORD(g) (IS_L(g) || (v == V_QWEN35 && IS_M(g)))
    size_t pos = ini;
    while (pos < end) {
        uint32_t c = cp[pos];
        unsigned f = cl[pos];
        if (c == '\'' && pos + 1 < end) {
            uint32_t c1 = ascii_lower(cp[pos + 1]);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                pos += 2;
                emit(o, pos);
                continue;
            }
            if (pos + 2 < end) {
                uint32_t c2 = ascii_lower(cp[pos + 2]);
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
                    (c1 == 'l' && c2 == 'l')) {
                    pos += 3;
                    emit(o, pos);
                    continue;
                }
            }
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(c == '\r' || c == '\n' || IS_N(f)) && (WORD(f) || WORD(F(pos + 1)))) {
            pos++;
            while (WORD(F(pos)))
                pos++;
            emit(o, pos);
            continue;
        }
        if (IS_N(f)) {
            if (v == V_LLAMA3) { /* \p{N}{1,3} */
                size_t i0 = pos;
                while (IS_N(F(pos))) {
                    if (++pos - i0 >= 3) {
                        emit(o, pos);
                        i0 = pos;
                    }
                }
            } else {
                pos++;
            }
            emit(o, pos);
            continue;
        }
        /* <space>?[^\s\p{L}\p{N}]+[\r\n]* */
        unsigned f2 = c == ' ' ? F(pos + 1) : f;
        if (!IS_WS(f2) && !WORD(f2) && !IS_N(f2) && f != NONE) {
            pos += c == ' ';
            for (unsigned g = F(pos); g != NONE && !IS_WS(g) && !WORD(g) && !IS_N(g); g = F(pos))
                pos++;
            while (CP(pos) == '\r' || CP(pos) == '\n')
                pos++;
            emit(o, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (IS_WS(F(pos + nws))) {
            uint32_t c2 = cp[pos + nws];
            if (c2 == '\r' || c2 == '\n')
                last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            pos = last_rn;
            emit(o, pos);
            continue;
        }
        if (nws > 1 && pos + nws < end) { /* \s+(?!\S) */
            pos += nws - 1;
            emit(o, pos);
            continue;
        }
        if (nws > 0) { /* \s+ */
            pos += nws;
            emit(o, pos);
            continue;
        }
        emit(o, ++pos);
    }
#undef F
#undef CP
#undef WORD
}

/* ------------------------------------------------------------------------ */
/* std::regex steps                                                         */
/* ------------------------------------------------------------------------ */

/* DeepSeek LLM's letter class, from its split regex
 * "\s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+" (inclusive code point ranges). */
static const uint32_t g_ds_letters[][2] = {
    {0x0041, 0x005A},   {0x0061, 0x007A},   {0x00B5, 0x00B5},   {0x00C0, 0x00D6},
    {0x00D8, 0x00F6},   {0x00F8, 0x01BA},   {0x01BC, 0x01BF},   {0x01C4, 0x0293},
    {0x0295, 0x02AF},   {0x0370, 0x0373},   {0x0376, 0x0377},   {0x037B, 0x037D},
    {0x037F, 0x037F},   {0x0386, 0x0386},   {0x0388, 0x038A},   {0x038C, 0x038C},
    {0x038E, 0x03A1},   {0x03A3, 0x03F5},   {0x03F7, 0x0481},   {0x048A, 0x052F},
    {0x0531, 0x0556},   {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

static bool in_ranges(uint32_t c, const uint32_t (*r)[2], size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid][0])
            hi = mid;
        else if (c > r[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* The character classes the regex steps use. */
enum pk {
    PK_CRLF,          /* [\r\n] */
    PK_NUMBER,        /* \p{N} (collapsed) */
    PK_LETTER,        /* \p{L} (collapsed) */
    PK_PUNCT,         /* \p{P} (collapsed) */
    PK_DEFAULT_PUNCT, /* [\p{P}\$\+<=>\^~\|] (collapsed) */
    PK_CJK,           /* [一-龥ࠀ-一가-퟿] (code points) */
    PK_DS_LETTER,     /* DeepSeek LLM's letter class (code points) */
    PK_DS_PUNCT,      /* [!-/:-~！-／：-～‘-‟　-。] (code points) */
};

/*
 * In both views a White_Space code point is either itself (ASCII) or 0x0B,
 * so it is never in a \p{..} class nor in a non-ASCII range; the !IS_WS
 * tests below say exactly that (U+3000, inside [　-。], is 0x0B to
 * std::regex and does not match).
 */
static inline bool pk_match(enum pk k, uint32_t c, unsigned cl)
{
    switch (k) {
    case PK_CRLF: return c == '\r' || c == '\n';
    case PK_NUMBER: return IS_N(cl);
    case PK_LETTER: return IS_L(cl);
    case PK_PUNCT: return IS_P(cl) && !IS_WS(cl);
    case PK_DEFAULT_PUNCT:
        return (IS_P(cl) && !IS_WS(cl)) || c == '$' || c == '+' || c == '<' || c == '=' ||
               c == '>' || c == '^' || c == '~' || c == '|';
    case PK_CJK: return !IS_WS(cl) && ((c >= 0x800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF));
    case PK_DS_LETTER:
        return !IS_WS(cl) && in_ranges(c, g_ds_letters, sizeof(g_ds_letters) / sizeof(g_ds_letters[0]));
    case PK_DS_PUNCT:
        return !IS_WS(cl) && ((c >= '!' && c <= '/') || (c >= ':' && c <= '~') ||
                              (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF5E) ||
                              (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002));
    }
    return false;
}

/* "X": every code point of the class is a piece of its own. */
static void split_isolate(const struct hr_pretok *t, size_t ini, size_t end, struct seg_out *o,
                          enum pk k)
{
    for (size_t p = ini; p < end; p++) {
        if (pk_match(k, t->cps[p], t->cls[p])) {
            emit(o, p);
            emit(o, p + 1);
        }
    }
}

/* "X+": every maximal run of the class is a piece. */
static void split_runs(const struct hr_pretok *t, size_t ini, size_t end, struct seg_out *o,
                       enum pk k)
{
    size_t p = ini;
    while (p < end) {
        if (!pk_match(k, t->cps[p], t->cls[p])) {
            p++;
            continue;
        }
        emit(o, p);
        while (p < end && pk_match(k, t->cps[p], t->cls[p]))
            p++;
        emit(o, p);
    }
}

/*
 * "\s?X+" where X holds no White_Space: at a White_Space code point followed
 * by X the match is it plus the X run; \s? giving the space back cannot
 * help since X+ cannot start on it. Elsewhere a match is an X run.
 */
static void split_opt_ws_runs(const struct hr_pretok *t, size_t ini, size_t end,
                              struct seg_out *o, enum pk k)
{
    size_t p = ini;
    while (p < end) {
        size_t q;
        if (IS_WS(t->cls[p]) && p + 1 < end && pk_match(k, t->cps[p + 1], t->cls[p + 1]))
            q = p + 1;
        else if (pk_match(k, t->cps[p], t->cls[p]))
            q = p;
        else {
            p++;
            continue;
        }
        emit(o, p);
        while (q < end && pk_match(k, t->cps[q], t->cls[q]))
            q++;
        emit(o, q);
        p = q;
    }
}

/* "\s+$": only the White_Space run that ends the piece can reach "$". */
static void split_trailing_ws(const struct hr_pretok *t, size_t ini, size_t end, struct seg_out *o)
{
    size_t j = end;
    while (j > ini && IS_WS(t->cls[j - 1]))
        j--;
    emit(o, j);
}

/* "[0-9][0-9][0-9]": non-overlapping ASCII digit triples, left to right. */
static void split_digits3(const struct hr_pretok *t, size_t ini, size_t end, struct seg_out *o)
{
    const uint32_t *c = t->cps;
    size_t p = ini;
    while (p + 3 <= end) {
        if (c[p] >= '0' && c[p] <= '9' && c[p + 1] >= '0' && c[p + 1] <= '9' && c[p + 2] >= '0' &&
            c[p + 2] <= '9') {
            emit(o, p);
            emit(o, p + 3);
            p += 3;
        } else {
            p++;
        }
    }
}

/*
 * Tekken (Mistral Nemo), on collapsed text:
 *   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+      (1)
 *  |[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*      (2)
 *  |\p{N}                                                                (3)
 *  | ?[^\s\p{L}\p{N}]+[\r\n/]*                                           (4)
 *  |\s*[\r\n]+|\s+(?!\S)|\s+                                             (5-7)
 * Call a letter "upper" if it is not a-z and "lower" if it is not A-Z; a
 * non-ASCII letter (0xD2 when collapsed) is both. X is [^\r\n\p{L}\p{N}].
 * (1): X? is greedy; the upper run U from q is taken whole, then lowers. If
 *   the code point after U is lower (then it is a-z) the match runs to the
 *   end of the lower run. Otherwise U* gives back code points until a lower
 *   one can start the lower run: the last non-ASCII letter in U, after
 *   which the next code point is A-Z or the end, so the match ends right
 *   after it. Giving back X does not help (X is no letter).
 * (2): if (1) failed, U is all A-Z and non-empty, or there is no match; the
 *   trailing lower run is empty (else (1) had matched).
 * (5-7): \s*[\r\n]+ ends at the last CR/LF of the White_Space run; else the
 *   run, minus its last code point when something follows it inside the
 *   piece and the run is longer than one.
 * Every code point starts some alternative, so the matches tile the piece.
 */
/*
 * GPT-4o (o200k; gpt-oss, Llama 4), on collapsed text: Tekken's regex with
 * an optional contraction after each letter branch,
 *   (1)(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?
 *  |(2)(?:...same...)?
 *  |\p{N}{1,3}|(4)|(5-7)
 * The contraction group is optional and last in its branch, so it never
 * makes the branch fail: the letter match is the one Tekken finds, plus a
 * contraction when one follows inside the piece. (3) takes up to three
 * numbers instead of one.
 */
static size_t contraction_len(const struct hr_pretok *t, size_t e, size_t end)
{
    const uint32_t *cp = t->cps;
    if (e + 1 >= end || cp[e] != '\'')
        return 0;
    uint32_t c1 = ascii_lower(cp[e + 1]);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return 2;
    if (e + 2 >= end)
        return 0;
    uint32_t c2 = ascii_lower(cp[e + 2]);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return 3;
    return 0;
}

static size_t tekken_match(const struct hr_pretok *t, size_t p, size_t end, bool gpt4o)
{
    const uint32_t *cp = t->cps;
    const uint8_t *cl = t->cls;
#define LET(i)   (IS_L(cl[i]))
#define UPPER(i) (LET(i) && !(cp[i] >= 'a' && cp[i] <= 'z'))
#define LOWER(i) (LET(i) && !(cp[i] >= 'A' && cp[i] <= 'Z'))
#define XCH(i)   (cp[i] != '\r' && cp[i] != '\n' && !LET(i) && !IS_N(cl[i]))
#define PCH(i)   (!IS_WS(cl[i]) && !LET(i) && !IS_N(cl[i]))
    size_t q = p + (XCH(p) ? 1 : 0);
    size_t u = q, last_both = SIZE_MAX;
    while (u < end && UPPER(u)) {
        if (LOWER(u))
            last_both = u;
        u++;
    }
    size_t le = SIZE_MAX; /* the end of a letter branch's match */
    if (u < end && LOWER(u)) {
        le = u;
        while (le < end && LOWER(le))
            le++;
    } else if (last_both != SIZE_MAX) {
        le = last_both + 1;
    } else if (u > q) {
        le = u;
    }
    if (le != SIZE_MAX)
        return le + (gpt4o ? contraction_len(t, le, end) : 0) - p;
    if (IS_N(cl[p])) {
        size_t n = 1;
        while (gpt4o && n < 3 && p + n < end && IS_N(cl[p + n]))
            n++;
        return n;
    }
    size_t s = (cp[p] == ' ' && p + 1 < end && PCH(p + 1)) ? p + 1 : p;
    if (PCH(s)) {
        size_t e = s;
        while (e < end && PCH(e))
            e++;
        while (e < end && (cp[e] == '\r' || cp[e] == '\n' || cp[e] == '/'))
            e++;
        return e - p;
    }
    /* p is White_Space. */
    size_t w = p, last_rn = SIZE_MAX;
    while (w < end && IS_WS(cl[w])) {
        if (cp[w] == '\r' || cp[w] == '\n')
            last_rn = w;
        w++;
    }
    if (last_rn != SIZE_MAX)
        return last_rn + 1 - p;
    if (w == end || w - p == 1)
        return w - p;
    return w - 1 - p;
#undef LET
#undef UPPER
#undef LOWER
#undef XCH
#undef PCH
}

static void split_tekken(const struct hr_pretok *t, size_t ini, size_t end, struct seg_out *o,
                         bool gpt4o)
{
    size_t p = ini;
    while (p < end) {
        p += tekken_match(t, p, end, gpt4o);
        emit(o, p);
    }
}

/* ------------------------------------------------------------------------ */
/* The families                                                             */
/* ------------------------------------------------------------------------ */

enum step_kind {
    S_END,
    S_GPT2,
    S_LLAMA3,
    S_QWEN2,
    S_QWEN35,
    S_TEKKEN,
    S_GPT4O,
    S_ISOLATE,
    S_RUNS,
    S_OPT_WS_RUNS,
    S_TRAILING_WS,
    S_DIGITS3,
};

struct step {
    enum step_kind kind;
    enum pk pk;
};

/* llama.cpp's regex_exprs per family, in order. */
static const struct step g_steps[][7] = {
    [HR_PRE_DEFAULT] = {{S_RUNS, PK_DEFAULT_PUNCT}, {S_GPT2, 0}, {S_RUNS, PK_NUMBER},
                        {S_DIGITS3, 0}, {S_END, 0}},
    [HR_PRE_GPT2] = {{S_GPT2, 0}, {S_END, 0}},
    [HR_PRE_LLAMA3] = {{S_LLAMA3, 0}, {S_END, 0}},
    [HR_PRE_QWEN2] = {{S_QWEN2, 0}, {S_END, 0}},
    [HR_PRE_QWEN35] = {{S_QWEN35, 0}, {S_END, 0}},
    [HR_PRE_STARCODER] = {{S_ISOLATE, PK_NUMBER}, {S_GPT2, 0}, {S_END, 0}},
    [HR_PRE_DEEPSEEK_LLM] = {{S_ISOLATE, PK_CRLF}, {S_OPT_WS_RUNS, PK_DS_LETTER},
                             {S_OPT_WS_RUNS, PK_DS_PUNCT}, {S_TRAILING_WS, 0},
                             {S_RUNS, PK_CJK}, {S_RUNS, PK_NUMBER}, {S_END, 0}},
    [HR_PRE_DEEPSEEK_CODER] = {{S_ISOLATE, PK_CRLF}, {S_OPT_WS_RUNS, PK_LETTER},
                               {S_OPT_WS_RUNS, PK_PUNCT}, {S_RUNS, PK_CJK},
                               {S_ISOLATE, PK_NUMBER}, {S_END, 0}},
    [HR_PRE_TEKKEN] = {{S_TEKKEN, 0}, {S_END, 0}},
    [HR_PRE_GPT4O] = {{S_GPT4O, 0}, {S_END, 0}},
};

static void run_step(const struct hr_pretok *t, const struct step *s, size_t ini, size_t end,
                     struct seg_out *o)
{
    switch (s->kind) {
    case S_GPT2: split_gpt2(t, ini, end, o); break;
    case S_LLAMA3: split_llama3(t, ini, end, o, V_LLAMA3); break;
    case S_QWEN2: split_llama3(t, ini, end, o, V_QWEN2); break;
    case S_QWEN35: split_llama3(t, ini, end, o, V_QWEN35); break;
    case S_TEKKEN: split_tekken(t, ini, end, o, false); break;
    case S_GPT4O: split_tekken(t, ini, end, o, true); break;
    case S_ISOLATE: split_isolate(t, ini, end, o, s->pk); break;
    case S_RUNS: split_runs(t, ini, end, o, s->pk); break;
    case S_OPT_WS_RUNS: split_opt_ws_runs(t, ini, end, o, s->pk); break;
    case S_TRAILING_WS: split_trailing_ws(t, ini, end, o); break;
    case S_DIGITS3: split_digits3(t, ini, end, o); break;
    case S_END: break;
    }
    emit(o, end); /* the gap after the last match is a piece too */
}

enum hr_status hr_pretok_run(struct hr_pretok *p, enum hr_pre pre, const uint8_t *text,
                             size_t len, struct hr_err *err)
{
    /* At most one code point per byte, and one piece per code point. */
    if (len + 1 > p->cap_cps) {
        size_t cap = len + 1 > 256 ? len + 1 : 256;
        uint32_t *cps = realloc(p->cps, cap * sizeof(*cps));
        if (cps)
            p->cps = cps;
        uint8_t *cls = realloc(p->cls, cap);
        if (cls)
            p->cls = cls;
        uint32_t *ends = realloc(p->ends, cap * sizeof(*ends));
        if (ends)
            p->ends = ends;
        uint32_t *tmp = realloc(p->tmp, cap * sizeof(*tmp));
        if (tmp)
            p->tmp = tmp;
        if (!cps || !cls || !ends || !tmp)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory pre-tokenizing %zu bytes", len);
        p->cap_cps = p->cap_ends = cap;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += hr_utf8_decode(text + i, len - i, &c);
        p->cps[n] = c;
        p->cls[n] = (uint8_t)hr_ucd(c);
        n++;
    }
    p->n = n;
    p->n_ends = 0;
    if (n == 0)
        return HR_OK;
    if (n > UINT32_MAX - 1)
        return hr_err_set(err, HR_ERR_RANGE, "text of %zu code points is too long", n);
    p->ends[0] = (uint32_t)n;
    p->n_ends = 1;
    for (const struct step *s = g_steps[pre]; s->kind != S_END; s++) {
        struct seg_out o = {p->tmp, 0, 0};
        size_t ini = 0;
        for (size_t i = 0; i < p->n_ends; i++) {
            o.last = (uint32_t)ini;
            run_step(p, s, ini, p->ends[i], &o);
            ini = p->ends[i];
        }
        uint32_t *sw = p->ends;
        p->ends = p->tmp;
        p->tmp = sw;
        p->n_ends = o.n;
    }
    return HR_OK;
}

void hr_pretok_free(struct hr_pretok *p)
{
    free(p->cps);
    free(p->cls);
    free(p->ends);
    free(p->tmp);
    memset(p, 0, sizeof(*p));
}

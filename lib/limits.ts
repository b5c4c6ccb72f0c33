/**
 * The bounds every floor checks its input against, on the lowest floor so that each imports them
 * from here and none from a floor above.
 */

/**
 * The highest quota a route may declare: its RateLimit-Policy quota (up to 1000 windows of the
 * rate, for a fractional one) must stay an RFC 8941 integer, which has at most 15 digits.
 */
export const MAX_QUOTA = 999_999_999_999

/** The longest window, in seconds: a year. */
export const MAX_WINDOW_SECONDS = 365 * 24 * 3600

/** The longest block, in seconds: a year, as the longest window. */
export const MAX_BLOCK_SECONDS = MAX_WINDOW_SECONDS

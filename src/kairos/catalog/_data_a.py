"""Catalog domains: finance, web search, cloud files, calendar, maps."""

from __future__ import annotations

from kairos.catalog._spec import Domain
from kairos.catalog._spec import ToolDef as T

FINANCE = Domain(
    "finance",
    "Stock market and money: share prices, price history, company fundamentals, currency exchange rates, "
    "crypto prices, portfolio holdings, loan and mortgage calculations.",
    (
        T(
            "get_stock_quote",
            "Latest price, daily change and volume of one listed stock by ticker symbol. Use for 'what is X "
            "trading at'. Cannot give past prices (use get_stock_history) or news about the company.",
            ("symbol:str! Ticker symbol, e.g. AAPL or MSFT",),
            ("price", "change_pct", "volume", "currency"),
        ),
        T(
            "get_stock_history",
            "Daily closing prices of a stock over a past period. Use for charts, trends and returns over time. "
            "Cannot give intraday ticks or forecasts.",
            ("symbol:str! Ticker symbol, e.g. TSLA", "days:int=30 How many past trading days, e.g. 90"),
            ("date", "close_price", "volume"),
            many=True,
        ),
        T(
            "get_company_fundamentals",
            "Company financials: market cap, P/E ratio, revenue, earnings per share, dividend yield. Use to judge "
            "a company's valuation. Cannot give live prices.",
            ("symbol:str! Ticker symbol, e.g. NVDA",),
            ("market_cap_value", "pe_ratio", "revenue_amount", "eps_value", "dividend_rate"),
        ),
        T(
            "convert_currency",
            "Convert an amount of money from one currency to another at today's exchange rate. Use for 'how much "
            "is 100 USD in EUR'. Cannot convert crypto (use get_crypto_price).",
            (
                "amount:num! Amount to convert, e.g. 250",
                "from_currency:str! ISO code of the source currency, e.g. USD",
                "to_currency:str! ISO code of the target currency, e.g. EUR",
            ),
            ("converted_amount", "exchange_rate"),
        ),
        T(
            "get_exchange_rate",
            "The current exchange rate between two fiat currencies, without converting an amount. "
            "Cannot give historical rates.",
            ("base:str! ISO code, e.g. GBP", "quote:str! ISO code, e.g. JPY"),
            ("exchange_rate", "updated_at"),
        ),
        T(
            "get_crypto_price",
            "Current price of a cryptocurrency such as bitcoin or ether, in a fiat currency. Cannot trade.",
            ("coin:str! Coin symbol, e.g. BTC or ETH", "currency:str=USD Fiat currency code"),
            ("price", "change_pct", "market_cap_value"),
        ),
        T(
            "get_portfolio_holdings",
            "The positions in the user's brokerage portfolio with quantity and current value. Cannot buy or sell.",
            ("account:str=main Portfolio account name",),
            ("symbol", "quantity_count", "value"),
            many=True,
        ),
        T(
            "calculate_loan_payment",
            "Monthly payment and total interest of a loan or mortgage from principal, annual interest rate and "
            "term. Pure calculation; cannot check credit or apply for a loan.",
            (
                "principal:num! Loan amount, e.g. 300000",
                "annual_rate_pct:num! Yearly interest in percent, e.g. 4.5",
                "years:int! Term in years, e.g. 30",
            ),
            ("monthly_payment_amount", "total_interest_amount"),
        ),
        T(
            "place_stock_order",
            "Buy or sell shares of a stock in the user's brokerage account (a market order). Irreversible once "
            "filled. Cannot place options or crypto trades.",
            (
                "symbol:str! Ticker symbol, e.g. AMZN",
                "side:enum(buy,sell)! Buy or sell",
                "quantity:int! Number of shares, e.g. 10",
            ),
            ("order_id", "fill_price"),
            effect=True,
        ),
    ),
)

SEARCH = Domain(
    "search",
    "General web search engine: search the internet for pages, images and videos, get page summaries, "
    "look up encyclopedia facts and word definitions.",
    (
        T(
            "search_web",
            "Search the public web and return result titles, links and snippets. Use for general questions "
            "no specialised tool covers. Cannot read a full page (use summarize_webpage).",
            (
                "query:str! Search terms, e.g. 'best hiking trails Colorado'",
                "limit:int=5 Results per page",
                "page:int=1 Page",
            ),
            ("title", "url", "snippet"),
            many=True,
        ),
        T(
            "search_images",
            "Find images on the web matching a description. Returns image links and sizes. Cannot edit images.",
            ("query:str! What the image shows, e.g. 'red panda'", "limit:int=5 Results per page"),
            ("title", "url", "width_size", "height_size"),
            many=True,
        ),
        T(
            "search_videos",
            "Find videos (tutorials, talks, clips) on video sites. Returns titles, links and durations. "
            "Cannot download videos.",
            ("query:str! Search terms, e.g. 'how to change a bike tire'", "limit:int=5 Results per page"),
            ("title", "url", "duration_minutes", "channel"),
            many=True,
        ),
        T(
            "summarize_webpage",
            "Fetch one web page by URL and return a short summary of its main text. Use after search_web to read "
            "a result. Cannot log in or fill forms.",
            ("url:str! Address of the page, e.g. https://example.com/article",),
            ("title", "summary", "word_count"),
        ),
        T(
            "lookup_encyclopedia",
            "Look up an encyclopedia article on a topic, person, place or concept and return its summary. "
            "Use for background facts. Cannot give breaking news.",
            ("topic:str! Article topic, e.g. 'Marie Curie'",),
            ("title", "summary", "url"),
        ),
        T(
            "define_word",
            "Dictionary definition, part of speech and example sentence of an English word. Cannot translate "
            "(use translate_text).",
            ("word:str! The word, e.g. 'serendipity'",),
            ("definition", "part_of_speech", "example"),
        ),
        T(
            "translate_text",
            "Translate a piece of text into another language. Use for 'say this in Spanish'. Cannot translate "
            "documents or audio files.",
            ("text:str! Text to translate", "target_language:str! Language code, e.g. es, fr, de"),
            ("translated_text", "source_language"),
        ),
        T(
            "search_local_businesses",
            "Find businesses such as restaurants, shops or plumbers near a place, with ratings. Cannot book "
            "tables (use book_restaurant).",
            (
                "query:str! What to find, e.g. 'pizza'",
                "location:str! City or address, e.g. 'Austin, TX'",
                "limit:int=5 Results per page",
            ),
            ("name", "address", "rating_score", "phone"),
            many=True,
        ),
    ),
)

FILES = Domain(
    "files",
    "Cloud drive storage: upload, download, share, move and search documents and folders kept in the user's "
    "online drive (not the local workspace), compress archives, convert file formats.",
    (
        T(
            "drive_search_files",
            "Search the user's cloud drive for files by name or content. Cannot search the local disk.",
            ("query:str! Words in the file name or text, e.g. 'budget 2025'", "limit:int=10 Results per page"),
            ("file_id", "name", "size_bytes_count", "modified_at"),
            many=True,
        ),
        T(
            "drive_download_file",
            "Download a file from the cloud drive or from a URL into the drive's downloads folder. "
            "Cannot open or read the file's text (use drive_read_document).",
            ("source:str! A drive file id or an http(s) URL", "folder:str=Downloads Destination folder"),
            ("file_id", "name", "size_bytes_count"),
            effect=True,
        ),
        T(
            "drive_read_document",
            "Read the text of a document stored in the cloud drive (PDF, Word, text). Cannot read images.",
            ("file_id:str! Drive file id, e.g. file-3fa2c1", "page:int=1 Page of the text"),
            ("name", "text", "page_count"),
        ),
        T(
            "drive_upload_file",
            "Upload text content as a new file into the cloud drive. Cannot upload from the local disk.",
            ("name:str! File name, e.g. notes.txt", "content:str! The file's text", "folder:str=/ Drive folder"),
            ("file_id", "url"),
            effect=True,
        ),
        T(
            "drive_share_file",
            "Share a drive file with someone by email, as viewer or editor. Cannot share outside the drive.",
            (
                "file_id:str! Drive file id",
                "email:str! Address of the person, e.g. bob@example.com",
                "role:enum(viewer,editor)=viewer Access level",
            ),
            ("share_id", "url"),
            effect=True,
        ),
        T(
            "drive_move_file",
            "Move or rename a file inside the cloud drive. Cannot copy between different drives.",
            ("file_id:str! Drive file id", "destination:str! New folder path, e.g. /Archive/2025"),
            ("file_id", "path"),
            effect=True,
        ),
        T(
            "drive_create_folder",
            "Create a new folder in the cloud drive. Cannot create folders on the local disk.",
            ("path:str! Folder path, e.g. /Projects/Alpha",),
            ("folder_id", "path"),
            effect=True,
        ),
        T(
            "convert_file_format",
            "Convert a drive document to another format, e.g. DOCX to PDF or CSV to XLSX. Cannot do OCR.",
            ("file_id:str! Drive file id", "target_format:enum(pdf,docx,txt,csv,xlsx,png)! Output format"),
            ("file_id", "name"),
            effect=True,
        ),
        T(
            "compress_files",
            "Pack several drive files into one zip archive. Cannot extract archives.",
            ("file_ids:list! Drive file ids to include", "archive_name:str! Name of the zip, e.g. photos.zip"),
            ("file_id", "size_bytes_count"),
            effect=True,
        ),
    ),
)

CALENDAR = Domain(
    "calendar",
    "The user's calendar and schedule: meetings, appointments, events, availability, reminders, invitations.",
    (
        T(
            "list_calendar_events",
            "List the events in the user's calendar between two dates. Use for 'what is on my schedule'. "
            "Cannot see other people's calendars (use find_free_slots).",
            ("start_date:date! First day, YYYY-MM-DD", "end_date:date! Last day, YYYY-MM-DD"),
            ("event_id", "title", "start", "end"),
            many=True,
        ),
        T(
            "create_calendar_event",
            "Add a meeting or appointment to the user's calendar. Use for 'schedule', 'book a meeting', 'put on my "
            "calendar'. Does not send invitations (use invite_attendees).",
            (
                "title:str! Event title, e.g. 'Dentist'",
                "date:date! Day, YYYY-MM-DD",
                "start_time:str! Start, HH:MM 24h, e.g. 14:30",
                "duration_minutes:int=60 Length in minutes",
            ),
            ("event_id",),
            effect=True,
        ),
        T(
            "delete_calendar_event",
            "Cancel and remove an event from the user's calendar by its id. Irreversible.",
            ("event_id:str! Id from list_calendar_events",),
            ("event_id",),
            effect=True,
        ),
        T(
            "reschedule_calendar_event",
            "Move an existing calendar event to a new date and time.",
            ("event_id:str! Event id", "new_date:date! New day, YYYY-MM-DD", "new_start_time:str! New start, HH:MM"),
            ("event_id", "start"),
            effect=True,
        ),
        T(
            "find_free_slots",
            "Find times when all given people are free for a meeting of a given length. Cannot book the slot.",
            (
                "attendees:list! Email addresses",
                "date:date! Day to search, YYYY-MM-DD",
                "duration_minutes:int=30 Meeting length",
            ),
            ("start", "end"),
            many=True,
        ),
        T(
            "invite_attendees",
            "Send calendar invitations for an existing event to people by email.",
            ("event_id:str! Event id", "attendees:list! Email addresses to invite"),
            ("invited_count",),
            effect=True,
        ),
        T(
            "set_reminder",
            "Set a reminder that alerts the user at a given date and time with a short note. Cannot repeat "
            "(one-off only).",
            ("text:str! What to remind, e.g. 'call mom'", "date:date! Day, YYYY-MM-DD", "time:str! HH:MM 24h"),
            ("reminder_id",),
            effect=True,
        ),
        T(
            "get_public_holidays",
            "Public holidays of a country in a year. Cannot give school holidays.",
            ("country:str! ISO country code, e.g. DE", "year:int! Year, e.g. 2026"),
            ("date", "name"),
            many=True,
        ),
    ),
)

MAPS = Domain(
    "maps",
    "Maps, places and navigation: geocode addresses, driving or walking directions, travel time and distance, "
    "nearby points of interest, time zones, elevation, traffic.",
    (
        T(
            "geocode_address",
            "Turn a street address or place name into latitude and longitude. Cannot route.",
            ("address:str! Address, e.g. '1600 Amphitheatre Pkwy, Mountain View'",),
            ("lat", "lon", "formatted_address"),
        ),
        T(
            "reverse_geocode",
            "Turn latitude and longitude into the nearest street address.",
            ("lat:num! Latitude, e.g. 48.8584", "lon:num! Longitude, e.g. 2.2945"),
            ("formatted_address", "country"),
        ),
        T(
            "get_directions",
            "Turn-by-turn directions between two places by car, on foot, by bike or transit. Use for 'how do I get "
            "from A to B'.",
            (
                "origin:str! Start address or place",
                "destination:str! End address or place",
                "mode:enum(driving,walking,bicycling,transit)=driving Travel mode",
            ),
            ("distance_km", "duration_minutes", "steps_count", "summary"),
        ),
        T(
            "get_travel_distance",
            "Only the distance and travel time between two places, without directions.",
            ("origin:str! Start place", "destination:str! End place"),
            ("distance_km", "duration_minutes"),
        ),
        T(
            "find_nearby_places",
            "Points of interest of a type (gas station, pharmacy, ATM, park) near coordinates or an address, "
            "with distance. Cannot give reviews.",
            ("location:str! Address or 'lat,lon'", "place_type:str! e.g. pharmacy", "radius_km:num=2 Search radius"),
            ("name", "address", "distance_km"),
            many=True,
        ),
        T(
            "get_timezone",
            "The time zone and current UTC offset of a city or coordinates.",
            ("location:str! City or 'lat,lon', e.g. Tokyo",),
            ("timezone", "utc_offset_hours"),
        ),
        T(
            "get_elevation",
            "Elevation above sea level in meters of a point.",
            ("lat:num! Latitude", "lon:num! Longitude"),
            ("elevation_m",),
        ),
        T(
            "get_traffic_conditions",
            "Live traffic congestion and incidents on a route or road. Cannot predict future traffic.",
            ("road:str! Road or route, e.g. 'I-405 northbound'",),
            ("congestion_level", "delay_minutes", "incidents_count"),
        ),
    ),
)

DOMAINS_A = (FINANCE, SEARCH, FILES, CALENDAR, MAPS)
